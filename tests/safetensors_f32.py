"""Reading the float32 tensors of a safetensors file with the standard library only, for the test
scripts that compare trained weights (tests/mp, tests/bindings)."""
import json
import struct


def read_safetensors(path):
    """name -> tuple of floats, for every tensor of the file (all must be F32)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", e
        begin, end = e["data_offsets"]
        out[name] = struct.unpack(f"<{(end - begin) // 4}f", data[begin:end])
    return out


def max_abs_diff(a, b):
    """The largest element-wise difference between two such files' tensors (same names required)."""
    assert a.keys() == b.keys(), (a.keys(), b.keys())
    return max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in a)
