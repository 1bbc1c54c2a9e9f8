"""Round trip between Flotilla's safetensors reader/writer and Python's reference package.

Usage: safetensors_compat.py ST_TOOL WORKDIR
  C -> Python: st_tool writes the reference model (see tests/core/tools/st_tool.c); numpy's
               load_file and the Rust deserializer read it and check every value.
  Python -> C: safetensors writes files (numpy save_file, and raw TensorSpecs incl. BF16);
               st_tool dump reads them with the C reader; every byte, shape and dtype is checked.
Exits non-zero with a message on the first mismatch.
"""
import json
import os
import subprocess
import sys

import numpy as np
import safetensors
from safetensors import TensorSpec
from safetensors.numpy import load_file, save_file

NUMPY = {
    "F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16,
    "I32": np.int32, "I64": np.int64, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32,
    "U64": np.uint64, "BOOL": np.bool_, "C64": np.complex64,
}
META = {"flotilla.arch": "mlp-test", "flotilla.version": "7", "note": "h\u00e9llo"}


def expected(dtype):
    """The [2,3] reference tensor for dtype, as numpy (BF16 as float32 values)."""
    k = np.arange(6)
    if dtype in ("F16", "F32", "F64", "BF16"):
        v = (k - 3) / 4.0
        return v.astype(np.float32 if dtype == "BF16" else NUMPY[dtype]).reshape(2, 3)
    if dtype == "BOOL":
        return (k % 3 == 0).reshape(2, 3)
    if dtype == "C64":
        return (k - 1j * k).astype(np.complex64).reshape(2, 3)
    if dtype.startswith("I"):
        return (3 * k - 5).astype(NUMPY[dtype]).reshape(2, 3)
    return (3 * k + 1).astype(NUMPY[dtype]).reshape(2, 3)


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def c_to_python(tool, work):
    np_path = os.path.join(work, "c_numpy.safetensors")
    all_path = os.path.join(work, "c_all.safetensors")
    subprocess.run([tool, "write", np_path, "--numpy-only"], check=True)
    subprocess.run([tool, "write", all_path], check=True)

    got = load_file(np_path)
    check(set(got) == {"t." + d for d in NUMPY} | {"scalar", "empty"},
          f"tensor names {sorted(got)}")
    for d, npt in NUMPY.items():
        a = got["t." + d]
        check(a.dtype == np.dtype(npt), f"t.{d}: dtype {a.dtype}")
        check(np.array_equal(a, expected(d)), f"t.{d}: values {a.ravel()}")
    check(got["scalar"].shape == () and got["scalar"].dtype == np.int32 and got["scalar"] == 42,
          "scalar")
    check(got["empty"].shape == (0, 4) and got["empty"].dtype == np.float32, "empty")
    with safetensors.safe_open(np_path, framework="numpy") as f:
        check(f.metadata() == META, f"metadata {f.metadata()}")

    # BF16 is not a numpy type: read it through the reference (Rust) deserializer.
    with open(all_path, "rb") as f:
        items = dict(safetensors.deserialize(f.read()))
    bf = items["t.BF16"]
    check(bf["dtype"] == "BF16" and list(bf["shape"]) == [2, 3], f"t.BF16 header {bf}")
    bits = np.frombuffer(bytes(bf["data"]), dtype="<u2").astype(np.uint32) << 16
    check(np.array_equal(bits.view(np.float32).reshape(2, 3), expected("BF16")),
          "t.BF16 values")
    for d in NUMPY:
        check(bytes(items["t." + d]["data"]) == got["t." + d].tobytes(), f"t.{d} raw bytes")
    print(f"C -> Python: {len(items)} tensors ok ({len(NUMPY) + 1} dtypes incl. BF16)")


def dump(tool, path):
    out = subprocess.run([tool, "dump", path], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def python_to_c(tool, work):
    rng = np.random.default_rng(1234)
    arrays = {
        "w.f32": rng.standard_normal((3, 5)).astype(np.float32),
        "w.f16": rng.standard_normal((7,)).astype(np.float16),
        "w.f64": rng.standard_normal((2, 2, 2)),
        "i.i64": rng.integers(-2**62, 2**62, size=(4,), dtype=np.int64),
        "i.i32": rng.integers(-2**31, 2**31, size=(2, 3), dtype=np.int32),
        "i.i16": rng.integers(-2**15, 2**15, size=(3,), dtype=np.int16),
        "i.i8": rng.integers(-128, 128, size=(5,), dtype=np.int8),
        "u.u8": rng.integers(0, 256, size=(9,), dtype=np.uint8),
        "u.u16": rng.integers(0, 2**16, size=(2,), dtype=np.uint16),
        "u.u32": rng.integers(0, 2**32, size=(2,), dtype=np.uint32),
        "u.u64": rng.integers(0, 2**63, size=(2,), dtype=np.uint64),
        "b.mask": rng.integers(0, 2, size=(2, 4)).astype(np.bool_),
        "c.c64": (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(np.complex64),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.int64),
    }
    meta = {"flotilla.arch": "cnn", "flotilla.version": "12", "k\u00fcrz": "\u2713"}
    path = os.path.join(work, "py_numpy.safetensors")
    save_file(arrays, path, metadata=meta)
    d = dump(tool, path)
    check(d["metadata"] == meta, f"metadata {d['metadata']}")
    check(set(d["tensors"]) == set(arrays), f"names {sorted(d['tensors'])}")
    for name, a in arrays.items():
        t = d["tensors"][name]
        check(NUMPY[t["dtype"]] == a.dtype.type, f"{name}: dtype {t['dtype']}")
        check(t["shape"] == list(a.shape), f"{name}: shape {t['shape']}")
        check(bytes.fromhex(t["hex"]) == a.tobytes(), f"{name}: data")

    # Raw TensorSpecs: BF16 (bits of float32 values) next to F16/F32/I64 and U8.
    vals = rng.standard_normal(6).astype(np.float32)
    bf16 = (vals.view(np.uint32) >> 16).astype("<u2")
    raw = {
        "bf16": (bf16, "bfloat16", [2, 3]),
        "f16": (vals.astype(np.float16), "float16", [6]),
        "f32": (vals, "float32", [3, 2]),
        "i64": (np.arange(4, dtype=np.int64) - 2, "int64", [4]),
        "u8": (np.arange(3, dtype=np.uint8), "uint8", [3]),
    }
    specs = {n: TensorSpec(dtype=dt, shape=sh, data_ptr=a.ctypes.data, data_len=a.nbytes)
             for n, (a, dt, sh) in raw.items()}
    path = os.path.join(work, "py_raw.safetensors")
    safetensors.serialize_file(specs, path, metadata={"format": "raw"})
    d = dump(tool, path)
    want_dtype = {"bf16": "BF16", "f16": "F16", "f32": "F32", "i64": "I64", "u8": "U8"}
    check(d["metadata"] == {"format": "raw"}, f"raw metadata {d['metadata']}")
    for name, (a, _, sh) in raw.items():
        t = d["tensors"][name]
        check(t["dtype"] == want_dtype[name], f"{name}: dtype {t['dtype']}")
        check(t["shape"] == sh, f"{name}: shape {t['shape']}")
        check(bytes.fromhex(t["hex"]) == a.tobytes(), f"{name}: data")
    print(f"Python -> C: {len(arrays) + len(raw)} tensors ok (incl. BF16 via raw bytes)")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}")
    c_to_python(tool, work)
    python_to_c(tool, work)


if __name__ == "__main__":
    main()
