"""Decode benchmark on the embedded SmolLM2 Q4_1 GGUF.

CPU (default): ingot vs llama.cpp (llama-cpp-python from
scripts/requirements-parity.txt).
usage: .venv/bin/python bench/bench_decode.py [--runs 3] [--threads 2]
                                              [--prompt-tokens 512] [--new-tokens 128]

--device cuda: `ingot generate --device cuda` (the device decode path: the
step replayed as a graph, and with INGOT_NO_GRAPH=1 op by op), prompt and
decode tokens per second as the command reports them (its own clock; greedy,
EOS ignored is not available there, so the decode count is what it made).
usage: .venv/bin/python bench/bench_decode.py --device cuda [--runs 3]

Both engines get the same token ids (a fixed text tokenized by ingot and
truncated to --prompt-tokens), the same thread count and the same greedy loop
(numpy argmax of the last logits, EOS ignored, --new-tokens steps). Each
measurement runs in a fresh process (no shared OpenMP pool), loads the model,
warms it up with one short forward, then times with time.perf_counter:
prompt = one forward of the whole prompt; decode = the new-token loop.
Runs alternate ingot / llama.cpp; the table shows medians and the ratio
ingot / llama.cpp in tokens per second (above 1: ingot is faster).
"""
import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LIB = os.environ.get("INGOT_LIB") or os.path.join(ROOT, "build", "libingot.so")
VOCAB = 49152
TEXT = ("The history of the printing press begins in the fifteenth century, when Johannes "
        "Gutenberg combined movable metal type, oil-based inks and a wooden press adapted from "
        "those used to make wine. Books, once copied by hand over months, could now be produced "
        "by the hundreds, and ideas travelled faster than ever before across Europe. ")


def ingot_lib():
    """libingot with the model API declared once, as the tests declare it
    (tests/py/model_ctypes.py); loaded only by the processes that use it."""
    os.environ.setdefault("INGOT_LIB", LIB)
    sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
    from model_ctypes import lib
    return lib


def cpu_device():
    from ingot_ctypes import Device
    return Device(0, 0)


def model_path():
    if os.environ.get("INGOT_SMOLLM2_GGUF"):  # the GPU machine (scripts/gpu-model.py)
        return os.environ["INGOT_SMOLLM2_GGUF"]
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch-model")], check=True,
                         capture_output=True, text=True)
    return os.path.join(ROOT, out.stdout.strip().splitlines()[-1])


def prompt_ids(path, n):
    lib = ingot_lib()
    m = lib.ingot_model_load(path.encode(), cpu_device())
    if not m:
        sys.exit(f"ingot_model_load: {lib.ingot_last_error().decode()}")
    text = (TEXT * (n // 40 + 2)).encode()
    ids = np.zeros(len(text), np.int32)
    k = lib.ingot_tokenize(lib.ingot_model_tokenizer(m), text, len(text), False, ids.ctypes.data,
                           len(ids))
    lib.ingot_model_free(m)
    if k < n:
        sys.exit(f"prompt text gives only {k} tokens")
    return [int(t) for t in ids[:n]]


# ---- workers (one measurement each, in a fresh process) ----

def worker_ingot(path, ids, new, threads):
    lib = ingot_lib()
    m = lib.ingot_model_load(path.encode(), cpu_device())
    if not m:
        sys.exit(f"ingot_model_load: {lib.ingot_last_error().decode()}")
    logits = np.zeros(VOCAB, np.float32)

    def fwd(toks):
        a = np.ascontiguousarray(toks, np.int32)
        if lib.ingot_model_forward(m, a.ctypes.data, len(a), logits.ctypes.data):
            sys.exit(f"ingot_model_forward: {lib.ingot_last_error().decode()}")
        return logits

    fwd(ids[:16])  # warm-up: page in the weights
    lib.ingot_model_reset(m)
    t0 = time.perf_counter()
    out = fwd(ids)
    t1 = time.perf_counter()
    toks = []
    for _ in range(new):
        t = int(out.argmax())
        toks.append(t)
        out = fwd([t])
    t2 = time.perf_counter()
    lib.ingot_model_free(m)
    return t1 - t0, t2 - t1, toks


def worker_llama(path, ids, new, threads):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=1024, n_batch=512, n_threads=threads,
                          n_threads_batch=threads, logits_all=False, verbose=False, seed=0)
    nv = llm.n_vocab()

    def last():  # logits_all=False: llama.cpp keeps only the last token's row
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(nv,))

    llm.eval(ids[:16])  # warm-up: page in the weights
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    out = last()
    t1 = time.perf_counter()
    toks = []
    for _ in range(new):
        t = int(out.argmax())
        toks.append(t)
        llm.eval([t])
        out = last()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, toks


def detok(path, ids):
    """Text of ids (the prompt for the ingot command)."""
    lib = ingot_lib()
    m = lib.ingot_model_load(path.encode(), cpu_device())
    a = np.ascontiguousarray(ids, np.int32)
    buf = ctypes.create_string_buffer(64 * len(ids) + 64)
    lib.ingot_detokenize.restype = ctypes.c_int64
    lib.ingot_detokenize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                     ctypes.c_bool, ctypes.c_char_p, ctypes.c_size_t]
    n = lib.ingot_detokenize(lib.ingot_model_tokenizer(m), a.ctypes.data, len(a), True, buf,
                             len(buf))
    lib.ingot_model_free(m)
    return buf.raw[:n].decode("utf-8", "replace")


STATS = re.compile(r"prompt: (\d+) tokens, ([\d.]+) tok/s; decode: (\d+) tokens, ([\d.]+) tok/s")


def run_cli(path, text, new, device, graph):
    """One `ingot generate` run: (prompt tokens, prompt tok/s, decode tokens, decode tok/s)."""
    cli = os.path.join(os.path.dirname(os.path.abspath(LIB)), "bin", "ingot")
    env = dict(os.environ)
    env.pop("INGOT_NO_GRAPH", None)
    if not graph:
        env["INGOT_NO_GRAPH"] = "1"
    out = subprocess.run([cli, "generate", "-m", path, "--device", device, "--no-chat",
                          "--ctx", "2048", "-n", str(new), "-p", text], env=env,
                         capture_output=True, text=True)
    m = STATS.search(out.stderr)
    if out.returncode or not m:
        sys.exit(f"ingot generate failed:\n{out.stderr[-2000:]}")
    return int(m[1]), float(m[2]), int(m[3]), float(m[4])


def main_device(a):
    path = model_path()
    text = detok(path, prompt_ids(path, a.prompt_tokens))
    res = {"graph": [], "eager": []}
    for r in range(a.runs):
        for mode in res:
            res[mode].append(run_cli(path, text, a.new_tokens, a.device, mode == "graph"))
            pt, pr, dt, dr = res[mode][-1]
            print(f"run {r + 1} {mode:5s}: prompt {pt} tokens {pr:9.1f} tok/s, decode {dt} "
                  f"tokens {dr:8.1f} tok/s", file=sys.stderr)
    print(f"SmolLM2-135M-Instruct Q4_1 on {a.device}, `ingot generate`, prompt ~{a.prompt_tokens} "
          f"tokens, up to {a.new_tokens} new tokens (greedy), median of {a.runs}")
    print(f"| {'decode step':11s} | {'prompt tok/s':>12s} | {'decode tok/s':>12s} |")
    print(f"|{'-' * 13}|{'-' * 14}|{'-' * 14}|")
    for mode, rows in res.items():
        p = statistics.median(x[1] for x in rows)
        d = statistics.median(x[3] for x in rows)
        print(f"| {mode:11s} | {p:12.1f} | {d:12.1f} |")


def run_worker(engine, path, ids, new, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    job = json.dumps({"path": path, "ids": ids, "new": new, "threads": threads})
    out = subprocess.run([sys.executable, __file__, "--worker", engine], input=job, env=env,
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{engine} worker failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--worker", choices=["ingot", "llama.cpp"])
    ap.add_argument("--device", default="cpu", help="cpu (vs llama.cpp) or cuda / cuda:N")
    a = ap.parse_args()
    if a.device != "cpu" and not a.worker:
        return main_device(a)
    if a.worker:
        job = json.loads(sys.stdin.read())
        fn = worker_ingot if a.worker == "ingot" else worker_llama
        tp, td, toks = fn(job["path"], job["ids"], job["new"], job["threads"])
        print(json.dumps({"prompt_s": tp, "decode_s": td, "tokens": toks}))
        return

    path = model_path()
    ids = prompt_ids(path, a.prompt_tokens)
    res = {"ingot": [], "llama.cpp": []}
    for r in range(a.runs):
        for eng in res:  # interleaved
            res[eng].append(run_worker(eng, path, ids, a.new_tokens, a.threads))
            x = res[eng][-1]
            print(f"run {r + 1} {eng:9s}: prompt {a.prompt_tokens / x['prompt_s']:8.1f} tok/s, "
                  f"decode {a.new_tokens / x['decode_s']:7.1f} tok/s", file=sys.stderr)

    def med(eng, key, n):
        return statistics.median(n / x[key] for x in res[eng])

    rows = [(eng, med(eng, "prompt_s", a.prompt_tokens), med(eng, "decode_s", a.new_tokens))
            for eng in res]
    print(f"SmolLM2-135M-Instruct Q4_1, {a.threads} threads, prompt {a.prompt_tokens} tokens, "
          f"decode {a.new_tokens} tokens (greedy), median of {a.runs}")
    print(f"| {'engine':10s} | {'prompt tok/s':>12s} | {'decode tok/s':>12s} |")
    print(f"|{'-' * 12}|{'-' * 14}|{'-' * 14}|")
    for eng, p, d in rows:
        print(f"| {eng:10s} | {p:12.1f} | {d:12.1f} |")
    (_, pi, di), (_, pl, dl) = rows
    print(f"| {'ratio':10s} | {pi / pl:11.2f}x | {di / dl:11.2f}x |")
    a_t, b_t = res["ingot"][0]["tokens"], res["llama.cpp"][0]["tokens"]
    same = next((i for i, (p, q) in enumerate(zip(a_t, b_t)) if p != q), len(a_t))
    print(f"greedy tokens identical for the first {same} of {len(a_t)}")


if __name__ == "__main__":
    main()
