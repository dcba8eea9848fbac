"""Write safetensors files by hand (no package needed): u64 LE header length,
JSON header, then the raw little-endian bytes of each tensor."""
import json
import struct

import ml_dtypes
import numpy as np

ST_DTYPE = {
    np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
    np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(np.float64): "F64",
    np.dtype(ml_dtypes.float8_e4m3fn): "F8_E4M3", np.dtype(ml_dtypes.float8_e5m2): "F8_E5M2",
    np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.int16): "I16",
    np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL",
}


def pack(header, data, pad=True):
    """header: dict (dumped to JSON) or raw bytes/str; data: bytes."""
    if isinstance(header, dict):
        header = json.dumps(header)
    if isinstance(header, str):
        header = header.encode()
    if pad:
        header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data


def st_bytes(tensors, metadata=None, pad=True):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": ST_DTYPE[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata is not None:
        header["__metadata__"] = metadata
    return pack(header, b"".join(blobs), pad)


def write_st(path, tensors, metadata=None, pad=True):
    with open(path, "wb") as f:
        f.write(st_bytes(tensors, metadata, pad))


def write_sharded(d, tensors, n_shards):
    """Split tensors over n_shards files + model.safetensors.index.json."""
    names = list(tensors)
    wm = {}
    for s in range(n_shards):
        fn = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::n_shards]}
        write_st(str(d / fn), part)
        wm.update({n: fn for n in part})
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": wm}))
    return wm
