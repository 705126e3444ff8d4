"""Read model configs and safetensors checkpoints on a box, without loading a model.

Everything goes through a ``Box`` (``remote.connect(...)``): ``read_text`` for ``config.json``,
``file_size`` + ``read_bytes(path, offset, length)`` for safetensors headers and single tensors,
so a 1-trillion-parameter checkpoint costs a few kilobytes to inspect.

The safetensors format (https://github.com/huggingface/safetensors, format as of
safetensors 0.4-0.8): 8 bytes little-endian ``u64`` header length ``N``, then ``N`` bytes of
UTF-8 JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``,
then the data; offsets are relative to the byte after the header. The reference reader refuses
headers over 100,000,000 bytes (``MAX_HEADER_SIZE``); so does this one.

Errors::

    CheckpointError              .path
    ├── ConfigUnreadable         config.json missing, unreadable or not a JSON object
    ├── CheckpointUnreadable     a safetensors header (or index) is unusable; .reason
    └── TensorNotFound           no tensor of that name in the checkpoint

The facts the preflight rules need are summarised in :mod:`workbench.checkpoint.facts`.
"""

from __future__ import annotations

import json
import posixpath
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from remote.errors import RemoteError, RemoteFileNotFound
from workbench.errors import CheckpointError, ConfigUnreadable, CheckpointUnreadable, TensorNotFound

__all__ = [
    "CheckpointError", "ConfigUnreadable", "CheckpointUnreadable", "TensorNotFound",
    "TensorInfo", "SafetensorsHeader", "DTYPE_BITS", "MAX_HEADER_SIZE",
    "read_json_config", "read_safetensors_header", "read_checkpoint_index", "read_checkpoint_tensors",
    "read_tensor", "read_tensor_data", "find_checkpoint_files",
]

#: safetensors' limit on the JSON header (``MAX_HEADER_SIZE`` in the reference Rust crate).
MAX_HEADER_SIZE = 100_000_000

#: Bits per element of every safetensors dtype (safetensors 0.8 ``Dtype``).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "F8_E8M0": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
}

_NUMPY_DTYPES: dict[str, str] = {
    "BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "F16": "<f2", "I32": "<i4",
    "U32": "<u4", "F32": "<f4", "I64": "<i8", "U64": "<u8", "F64": "<f8",
}


def _not_found(exc: BaseException) -> bool:
    return isinstance(exc, (RemoteFileNotFound, FileNotFoundError))


def _io_errors() -> tuple[type[BaseException], ...]:
    return (OSError, RemoteError)


# ---------------------------------------------------------------------------------------------
# config.json
# ---------------------------------------------------------------------------------------------


def read_json_config(box: Any, path: str, *, timeout: float = 30) -> dict:
    """Read a JSON object (``config.json``, an index) from the box.

    ``path`` may be the file or a model directory (then ``<dir>/config.json``).
    Raises :class:`ConfigUnreadable` when the file is missing, cannot be read, is not valid JSON
    (the message gives line and column) or is not a JSON object.
    """
    if not path.endswith(".json"):
        path = posixpath.join(path, "config.json")
    try:
        text = box.read_text(path, timeout=timeout)
    except _io_errors() as exc:
        if _not_found(exc):
            raise ConfigUnreadable("config file not found", path=path) from exc
        raise ConfigUnreadable(f"cannot read config file ({exc})", path=path) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigUnreadable(
            f"config file is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})", path=path
        ) from exc
    if not isinstance(data, dict):
        raise ConfigUnreadable(f"config file holds a JSON {type(data).__name__}, not an object", path=path)
    return data


# ---------------------------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """One tensor entry of a safetensors header.

    ``dtype``: safetensors dtype string (``"BF16"``); ``shape``: tuple of ints (a Linear
    weight is ``(out_features, in_features)``); ``data_offsets``: ``(begin, end)`` in bytes,
    relative to the start of the data section; ``file``: the safetensors file holding it;
    ``data_start``: absolute byte offset of the data section in that file (8 + header length).
    """

    dtype: str
    shape: tuple[int, ...]
    data_offsets: tuple[int, int]
    file: str = ""
    data_start: int = 0

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.data_offsets[1] - self.data_offsets[0]

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "shape": list(self.shape), "data_offsets": list(self.data_offsets),
                "file": self.file}


@dataclass(frozen=True)
class SafetensorsHeader(Mapping):
    """A parsed safetensors header: a read-only mapping ``{tensor name: TensorInfo}``.

    Also: ``metadata`` (the ``__metadata__`` dict or ``None``), ``path``, ``header_size``
    (bytes of JSON), ``file_size`` (bytes).
    """

    tensors: dict[str, TensorInfo]
    metadata: dict | None
    path: str
    header_size: int
    file_size: int

    def __getitem__(self, name: str) -> TensorInfo:
        return self.tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)


def _read_exact(box: Any, path: str, offset: int, length: int, timeout: float, what: str) -> bytes:
    try:
        data = box.read_bytes(path, offset, length, timeout=timeout)
    except _io_errors() as exc:
        if _not_found(exc):
            raise CheckpointUnreadable("safetensors file not found", path=path, reason="missing") from exc
        raise CheckpointUnreadable(f"cannot read {what} ({exc})", path=path, reason="unreadable") from exc
    if len(data) != length:
        raise CheckpointUnreadable(
            f"truncated: {what} needs {length} bytes at offset {offset}, got {len(data)}", path=path, reason="truncated"
        )
    return bytes(data)


def _file_size(box: Any, path: str, timeout: float) -> int:
    try:
        return int(box.file_size(path, timeout=timeout))
    except _io_errors() as exc:
        if _not_found(exc):
            raise CheckpointUnreadable("safetensors file not found", path=path, reason="missing") from exc
        raise CheckpointUnreadable(f"cannot stat file ({exc})", path=path, reason="unreadable") from exc


def read_safetensors_header(box: Any, path: str, *, timeout: float = 30) -> SafetensorsHeader:
    """Read and validate the header of one ``.safetensors`` file by byte range.

    Reads 8 bytes, then exactly the header; never the tensor data. Validates what the
    safetensors reference reader validates: file at least 8 bytes, header length
    ≤ :data:`MAX_HEADER_SIZE` and inside the file, UTF-8 JSON object, every entry with a known
    dtype, a shape of non-negative ints and ``data_offsets`` whose length matches
    shape × dtype size and whose end lies inside the file.
    Raises :class:`CheckpointUnreadable` (with ``.reason``) otherwise.
    """
    size = _file_size(box, path, timeout)
    if size < 8:
        raise CheckpointUnreadable(
            f"truncated: file is {size} bytes, shorter than the 8-byte header length", path=path, reason="truncated"
        )
    (n,) = struct.unpack("<Q", _read_exact(box, path, 0, 8, timeout, "the header length"))
    if n > MAX_HEADER_SIZE:
        raise CheckpointUnreadable(
            f"header length {n} bytes is over the {MAX_HEADER_SIZE}-byte limit (not a safetensors file, or corrupt)",
            path=path, reason="header-too-large",
        )
    if 8 + n > size:
        raise CheckpointUnreadable(
            f"truncated: header length {n} runs past the end of the {size}-byte file", path=path, reason="truncated"
        )
    raw = _read_exact(box, path, 8, n, timeout, "the JSON header")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointUnreadable(f"header is not JSON ({exc})", path=path, reason="not-json") from exc
    if not isinstance(header, dict):
        raise CheckpointUnreadable(f"header is a JSON {type(header).__name__}, not an object", path=path,
                                   reason="not-json")
    data_start = 8 + n
    data_size = size - data_start
    metadata = header.pop("__metadata__", None)
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise CheckpointUnreadable(f"tensor {name!r}: entry needs dtype, shape and data_offsets, got {entry!r}",
                                       path=path, reason="bad-entry")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPE_BITS:
            raise CheckpointUnreadable(f"tensor {name!r}: unknown dtype {dtype!r}", path=path, reason="unknown-dtype")
        if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                for d in shape)):
            raise CheckpointUnreadable(f"tensor {name!r}: bad shape {shape!r}", path=path, reason="bad-entry")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) and o >= 0 for o in offsets)
                and offsets[0] <= offsets[1]):
            raise CheckpointUnreadable(f"tensor {name!r}: bad data_offsets {offsets!r}", path=path, reason="bad-entry")
        info = TensorInfo(dtype, tuple(shape), (offsets[0], offsets[1]), file=path, data_start=data_start)
        expected = (info.numel * DTYPE_BITS[dtype] + 7) // 8
        if info.nbytes != expected:
            raise CheckpointUnreadable(
                f"tensor {name!r}: data_offsets span {info.nbytes} bytes but {dtype} {list(shape)} needs {expected}",
                path=path, reason="size-mismatch",
            )
        if offsets[1] > data_size:
            raise CheckpointUnreadable(
                f"tensor {name!r}: data offsets {offsets} run past the end of the file (data section is "
                f"{data_size} bytes of {size})", path=path, reason="offsets-past-end",
            )
        tensors[name] = info
    if metadata is not None and not isinstance(metadata, dict):
        raise CheckpointUnreadable(f"__metadata__ is not an object: {metadata!r}", path=path, reason="bad-entry")
    return SafetensorsHeader(tensors, metadata, path, n, size)


def read_checkpoint_index(box: Any, path: str, *, timeout: float = 30) -> dict[str, str]:
    """Read ``model.safetensors.index.json`` (``path``: the file or its directory).

    Returns ``weight_map``: ``{tensor name: shard path on the box}`` (shard paths joined to
    the index's directory). Raises :class:`CheckpointUnreadable` (``reason="bad-index"``)
    when the index is not JSON or has no ``weight_map`` object of strings.
    """
    if not path.endswith(".json"):
        path = posixpath.join(path, "model.safetensors.index.json")
    try:
        index = read_json_config(box, path, timeout=timeout)
    except ConfigUnreadable as exc:
        raise CheckpointUnreadable(str(exc).rsplit(": ", 1)[0], path=path, reason="bad-index") from exc
    wm = index.get("weight_map")
    if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
        raise CheckpointUnreadable("index has no weight_map of {tensor: shard file}", path=path, reason="bad-index")
    base = posixpath.dirname(path)
    return {name: posixpath.join(base, shard) for name, shard in wm.items()}


def find_checkpoint_files(box: Any, model_dir: str, *, timeout: float = 30) -> tuple[list[str], str | None]:
    """The safetensors files of a model directory and the index used, if any.

    Looks for ``model.safetensors``, then ``model.safetensors.index.json``. Returns
    ``([file, ...], index_path or None)``. Raises :class:`CheckpointUnreadable`
    (``reason="missing"``) when the directory has neither.
    """
    single = posixpath.join(model_dir, "model.safetensors")
    index = posixpath.join(model_dir, "model.safetensors.index.json")
    if box.exists(single, timeout=timeout):
        return [single], None
    if box.exists(index, timeout=timeout):
        wm = read_checkpoint_index(box, index, timeout=timeout)
        return sorted(set(wm.values())), index
    raise CheckpointUnreadable("no model.safetensors or model.safetensors.index.json in the model directory",
                               path=model_dir, reason="missing")


def read_checkpoint_tensors(box: Any, model_dir: str, *, timeout: float = 30) -> dict[str, TensorInfo]:
    """All tensors of a (possibly sharded) checkpoint: ``{name: TensorInfo}`` (``.file`` says
    which shard). Reads one header per shard. For a sharded checkpoint, a tensor the index maps
    to a shard whose header lacks it raises :class:`CheckpointUnreadable` (``bad-index``).
    """
    files, index = find_checkpoint_files(box, model_dir, timeout=timeout)
    tensors: dict[str, TensorInfo] = {}
    for f in files:
        tensors.update(read_safetensors_header(box, f, timeout=timeout).tensors)
    if index is not None:
        for name, shard in read_checkpoint_index(box, index, timeout=timeout).items():
            if name not in tensors or tensors[name].file != shard:
                raise CheckpointUnreadable(f"index maps {name!r} to {shard}, whose header does not hold it",
                                           path=index, reason="bad-index")
    return tensors


def read_tensor(box: Any, path: str, name: str, *, max_bytes: int = 64 << 20, timeout: float = 60) -> np.ndarray:
    """Read one tensor by byte range and return it as a numpy array of its shape.

    ``path``: a ``.safetensors`` file or a model directory (single file or sharded).
    Dtypes: BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, F32, F64 as themselves; BF16 is
    widened exactly to float32. Meant for small tensors (``d2t``: I64 ``(draft_vocab,)``,
    ``t2d``: BOOL ``(vocab,)``); refuses tensors over ``max_bytes``.
    Raises :class:`TensorNotFound`, :class:`CheckpointUnreadable`, or :class:`CheckpointError`
    for an unsupported dtype or a tensor over the limit.
    """
    if path.endswith(".safetensors"):
        tensors: Mapping[str, TensorInfo] = read_safetensors_header(box, path, timeout=timeout)
    else:
        tensors = read_checkpoint_tensors(box, path, timeout=timeout)
    if name not in tensors:
        raise TensorNotFound(f"no tensor {name!r} in the checkpoint", path=path)
    return read_tensor_data(box, tensors[name], name=name, max_bytes=max_bytes, timeout=timeout)


def read_tensor_data(box: Any, info: TensorInfo, *, name: str = "tensor", max_bytes: int = 64 << 20,
                     timeout: float = 60) -> np.ndarray:
    """The data of a tensor whose header entry is already read (``info``: its file, data start and
    offsets), by one byte-range read; decoded as :func:`read_tensor` does. ``name`` is for the
    messages. Raises :class:`CheckpointUnreadable` (a short read) or :class:`CheckpointError` (an
    unsupported dtype, a tensor over ``max_bytes``)."""
    if info.dtype != "BF16" and info.dtype not in _NUMPY_DTYPES:
        raise CheckpointError(f"tensor {name!r} has dtype {info.dtype}, which read_tensor does not decode",
                              path=info.file)
    if info.nbytes > max_bytes:
        raise CheckpointError(f"tensor {name!r} is {info.nbytes} bytes, over max_bytes={max_bytes}", path=info.file)
    raw = _read_exact(box, info.file, info.data_start + info.data_offsets[0], info.nbytes, timeout, f"tensor {name!r}")
    if info.dtype == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(info.shape)
    return np.frombuffer(raw, dtype=_NUMPY_DTYPES[info.dtype]).reshape(info.shape).copy()


