"""Tables and helpers shared by the reference tests."""
import os
import re
import subprocess

import ml_dtypes
import numpy as np
import pytest
from ingot_ctypes import DTYPES, NAMES

BF16 = np.dtype(ml_dtypes.bfloat16)
# ingot dtype name -> numpy dtype, for every ingot dtype
NP = dict(zip(NAMES, DTYPES))
INTS = ["uint8", "int8", "int16", "int32", "int64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
# relative tolerances of the elementwise ops (see test_unary / test_binary)
RTOL = {"float16": 1e-3, "bfloat16": 1e-2, "float32": 2e-6, "float64": 1e-12,
        "complex64": 1e-5, "complex128": 1e-12}


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def smollm2_path():
    """Path of the embedded SmolLM2 GGUF (scripts/fetch-model), or skip.
    INGOT_SMOLLM2_GGUF names a file to use instead (the GPU machine has no
    network: scripts/gpu-model.py rebuilds a same-shaped file there)."""
    if os.environ.get("INGOT_SMOLLM2_GGUF"):
        return os.environ["INGOT_SMOLLM2_GGUF"]
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # the ASan run's
    try:
        out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch-model")], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=600)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"scripts/fetch-model failed: {e}")
    lines = out.stdout.strip().splitlines()
    path = os.path.join(ROOT, lines[-1]) if lines else ""
    if out.returncode != 0 or not os.path.exists(path):
        pytest.skip(f"scripts/fetch-model failed: {out.stderr.strip()[-300:]}")
    return path


def smollm2_is_real(path):
    """Whether path holds the real SmolLM2 (the pinned sha256 of
    scripts/fetch-model), not the GPU machine's same-shaped stand-in (30
    copies of layer 0: right for CUDA-vs-CPU checks, but its text is not
    SmolLM2's, so checks of what the model says need the real one)."""
    import hashlib
    pinned = re.search(r'^sha=(\w+)', open(os.path.join(ROOT, "scripts", "fetch-model")).read(), re.M)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return bool(pinned) and h.hexdigest() == pinned.group(1)
