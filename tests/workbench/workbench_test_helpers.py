"""Helpers for the workbench tests: sparse safetensors files and fixture paths."""

from __future__ import annotations

import json
import pathlib
import struct

import numpy as np

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"

DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "F16": 2, "BF16": 2, "I32": 4, "F32": 4, "I64": 8, "F64": 8}


def fixture_config(name: str) -> dict:
    return json.loads((FIXTURES / "configs" / name).read_text())


def public_report(slug: str) -> dict:
    return json.loads((FIXTURES / "public-reports" / f"{slug}.json").read_text())


def write_sparse_safetensors(path, spec: dict, data: dict | None = None, metadata: dict | None = None) -> int:
    """Write a safetensors file whose header carries ``spec`` = ``{name: (dtype, shape)}``.

    Tensor bytes come from ``data[name]`` (a numpy array or bytes) when given; otherwise the
    file is ``truncate()``d to the size the offsets need, so the data is a sparse hole that
    costs no disk. Returns the file size in bytes.
    """
    data = data or {}
    header: dict = {}
    offset = 0
    for name, (dtype, shape) in spec.items():
        n = DTYPE_SIZE[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    if metadata is not None:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        base = 8 + len(raw)
        for name, arr in data.items():
            f.seek(base + header[name]["data_offsets"][0])
            f.write(arr.tobytes() if isinstance(arr, np.ndarray) else bytes(arr))
        f.truncate(base + offset)
    return base + offset


def write_raw(path, header_bytes: bytes, length: int | None = None, extra: bytes = b"") -> None:
    """Write a file with an explicit header length prefix (for malformed-header tests)."""
    n = len(header_bytes) if length is None else length
    pathlib.Path(path).write_bytes(struct.pack("<Q", n) + header_bytes + extra)
