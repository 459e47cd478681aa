#!/usr/bin/env python3
"""An independent safetensors reader and writer (struct, json, numpy; no
torch, no safetensors package), for checking ampkit's files against the spec.

  safetensors_numpy.py check PATH   reads ampkit's file, compares the values
  safetensors_numpy.py write PATH   writes a file for ampkit to read
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors, end = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        b, e = info["data_offsets"]
        assert b == end, f"{name}: gap or overlap at {b}"
        dtype = np.dtype(DTYPES[info["dtype"]]).newbyteorder("<")
        tensors[name] = np.frombuffer(body[b:e], dtype=dtype).reshape(info["shape"])
        end = e
    assert end == len(body), "data does not end where the last tensor ends"
    assert (8 + n) % 8 == 0, "header not padded to 8 bytes"
    return tensors, metadata


def expected():
    return {
        "f32": (np.arange(12, dtype=np.float32).reshape(3, 4) / 4).astype(np.float32),
        "f64": np.arange(5, dtype=np.float64) * 0.5,
        "f16": (np.arange(6, dtype=np.float32) / 8).astype(np.float16),
        "i64": np.arange(-3, 3, dtype=np.int64),
        "i32": np.arange(4, dtype=np.int32).reshape(2, 2),
        "u8": np.arange(10, dtype=np.uint8),
        "bool": np.array([True, False, True]),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }


def write(path, tensors, metadata):
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    names = {v: k for k, v in DTYPES.items()}
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": names[array.dtype.type], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "check":
        tensors, metadata = read(path)
        assert metadata == {"writer": "ampkit"}, metadata
        for name, want in expected().items():
            got = tensors[name]
            assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
            assert np.array_equal(got, want), (name, got, want)
        assert set(tensors) == set(expected()), sorted(tensors)
        print("numpy read ampkit's file: ok")
    elif mode == "write":
        tensors = expected()
        tensors["from_numpy"] = np.arange(7, dtype=np.float32) * 3
        write(path, tensors, {"writer": "numpy"})
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
