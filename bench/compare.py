"""Side-by-side table: Ingot's bench JSON against PyTorch's anchors JSON
(torch_anchors.py from ../shared/bench, run in the same call on the same GPU).

usage: python3 bench/compare.py INGOT_JSON TORCH_JSON
Ratio = PyTorch time / Ingot time (above 1: Ingot is faster).
"""
import json
import sys

# Ingot id -> PyTorch anchor id where they differ.
ALIAS = {"scaled_mm_fp8_8192": "scaled_mm_fp8e4m3_8192",
         "moe_layer_qwen3_30b_a3b": "moe_layer_qwen3_30b_a3b_gather",
         "moe_layer_qwen3_30b_a3b_graph": "moe_layer_qwen3_30b_a3b_gather_graph"}
# Goals from WORKLOADS.md and the issues: (kind, value): "ratio" (>= x PyTorch),
# "metric" (>= value in the row's metric), "us" (<= microseconds).
GOALS = {
    "copy_1GiB": ("metric", 4000), "gemm_bf16_8192": ("ratio", 0.97),
    "gemm_f32_8192": ("ratio", 0.97), "scaled_mm_fp8_8192": ("ratio", 0.97),
    "gemv_bf16_K2048_N6144": ("metric", 2500), "gemv_bf16_K4096_N14336": ("metric", 3600),
    "gemv_bf16_K2048_N151936": ("metric", 3800), "gemv_bf16_K8192_N28672": ("metric", 3800),
    "softmax_f32_B1_V151936": ("us", 6), "softmax_f32_B64_V151936": ("us", 25),
    "topk8_f32_B1_V151936": ("us", 10), "topk8_f32_B64_V151936": ("us", 20),
    "svd_f32_2048": ("us", 100000), "qr_f32_4096": ("us", 28000), "lu_c64_2048": ("us", 5500),
    "inv_f32_batch10000_8x8": ("us", 50), "trsm_f32_4096": ("us", 2900),
    "moe_layer_qwen3_30b_a3b": ("us", 25), "moe_layer_qwen3_30b_a3b_graph": ("us", 25),
}


def main():
    ours = json.load(open(sys.argv[1]))
    torch = json.load(open(sys.argv[2]))
    rows = []
    for r in ours:
        tid = ALIAS.get(r["id"], r["id"])
        t = torch.get(tid, {}).get("s") if isinstance(torch.get(tid), dict) else None
        ratio = t / r["median_s"] if t else None
        goal = GOALS.get(r["id"])
        met = "-"
        if goal:
            kind, v = goal
            if kind == "ratio" and ratio is not None:
                met = "yes" if ratio >= v else "no"
            elif kind == "metric":
                met = "yes" if r["value"] >= v else "no"
            elif kind == "us":
                met = "yes" if r["median_s"] * 1e6 <= v else "no"
            goal_s = {"ratio": f">= {v}x torch", "metric": f">= {v} {r['metric']}",
                      "us": f"<= {v} us"}[kind]
        else:
            goal_s = "-"
        rows.append((r["id"], r["median_s"] * 1e6, f"{r['value']:.1f} {r['metric']}",
                     f"{t * 1e6:.1f}" if t else "-", f"{ratio:.2f}" if ratio else "-", goal_s, met))
    hdr = ("id", "ingot us", "ingot rate", "torch us", "torch/ingot", "goal", "met")
    w = [max(len(str(x[i])) if not isinstance(x[i], float) else 10 for x in rows + [hdr])
         for i in range(len(hdr))]
    print("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
    for x in rows:
        cells = [f"{v:.1f}" if isinstance(v, float) else str(v) for v in x]
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(cells)))


if __name__ == "__main__":
    main()
