#!/usr/bin/env python3
"""Carry SmolLM2's GGUF to the GPU machine, which cannot download it and takes
at most 64 MiB per call: `pack` (here, needs the gguf package) keeps the
header, the non-layer tensors and block 0, and records for every other
block's tensor a copy of block 0's same tensor; `unpack` (there, plain
Python) rebuilds a file of the same size, shapes and types: a model with 30
copies of layer 0. It runs at the real model's speed and serves CUDA-vs-CPU
checks; its text is not SmolLM2's.

    scripts/gpu-model.py pack  MODEL.gguf DIR    # DIR/keep.bin, DIR/plan.json
    scripts/gpu-model.py unpack DIR OUT.gguf
"""
import json
import os
import re
import sys


def pack(model, out_dir):
    import gguf
    r = gguf.GGUFReader(model)
    size = os.path.getsize(model)
    tensors = [(t.name, int(t.data_offset), int(t.n_bytes)) for t in r.tensors]
    first = min(off for _, off, _ in tensors)
    keep, copies = [(0, first)], []
    by_name = {n: (off, nb) for n, off, nb in tensors}
    for name, off, nb in tensors:
        m = re.match(r"blk\.(\d+)\.(.*)", name)
        if m and m.group(1) != "0" and f"blk.0.{m.group(2)}" in by_name:
            src, snb = by_name[f"blk.0.{m.group(2)}"]
            assert snb == nb, name
            copies.append((off, src, nb))
        else:
            keep.append((off, nb))
    os.makedirs(out_dir, exist_ok=True)
    with open(model, "rb") as f, open(os.path.join(out_dir, "keep.bin"), "wb") as o:
        for off, nb in keep:
            f.seek(off)
            o.write(f.read(nb))
    with open(os.path.join(out_dir, "plan.json"), "w") as o:
        json.dump({"size": size, "keep": keep, "copies": copies}, o)


def unpack(in_dir, out):
    plan = json.load(open(os.path.join(in_dir, "plan.json")))
    with open(os.path.join(in_dir, "keep.bin"), "rb") as k, open(out, "wb") as o:
        o.truncate(plan["size"])
        for off, nb in plan["keep"]:
            o.seek(off)
            o.write(k.read(nb))
    with open(out, "r+b") as o:
        for dst, src, nb in plan["copies"]:
            o.seek(src)
            buf = o.read(nb)
            o.seek(dst)
            o.write(buf)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("pack", "unpack"):
        sys.exit(__doc__)
    (pack if sys.argv[1] == "pack" else unpack)(sys.argv[2], sys.argv[3])
