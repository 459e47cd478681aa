#!/usr/bin/env python3
"""Writes the seed inputs of bench/fuzz/checkpoint_fuzz.cpp into bench/fuzz/seeds/.

Each seed is a selector byte (0: safetensors, 1: manifest) followed by the
reader's input. Uses only the standard library (struct, json).
Usage: python3 bench/fuzz/make_seeds.py [OUT_DIR]
"""
import json
import os
import struct
import sys

SAFETENSORS = b"\x00"
MANIFEST = b"\x01"


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] in data order."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(raw for *_, raw in tensors)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
    os.makedirs(out, exist_ok=True)
    seeds = {
        # Two tensors: F32 [2, 2] and I64 [3], with metadata.
        "safetensors_two_tensors": SAFETENSORS + safetensors(
            [
                ("weight", "F32", [2, 2], struct.pack("<4f", 1.0, -2.5, 0.0, 3.25)),
                ("step", "I64", [3], struct.pack("<3q", 1, -1, 1 << 40)),
            ],
            {"format": "pt"},
        ),
        # BOOL, BF16 and an empty tensor, no metadata.
        "safetensors_bool_bf16_empty": SAFETENSORS + safetensors(
            [
                ("mask", "BOOL", [4], bytes([1, 0, 0, 1])),
                ("h", "BF16", [1, 2], struct.pack("<2H", 0x3F80, 0xC000)),
                ("none", "F16", [0, 3], b""),
            ]
        ),
        "manifest": MANIFEST + json.dumps(
            {
                "format": "ampkit-checkpoint",
                "version": 1,
                "ampkit_version": "0.1.0",
                "world_size": 1,
                "step": 3,
                "files": [{"name": "model.safetensors", "size": 10, "crc32c": 5}],
            }
        ).encode(),
        "manifest_two_ranks": MANIFEST + json.dumps(
            {
                "format": "ampkit-checkpoint",
                "version": 1,
                "ampkit_version": "0.1.0",
                "world_size": 2,
                "step": 1200,
                "files": [
                    {"name": "model.safetensors", "size": 4096, "crc32c": 3735928559},
                    {"name": "optimizer_rank1.safetensors", "size": 0, "crc32c": 0},
                ],
            },
            indent=2,
        ).encode() + b"\n",
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {out}")


if __name__ == "__main__":
    main()
