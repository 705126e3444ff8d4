"""A repaired copy of the draft on the box: the ``draft-copy`` kind of fix, made and proved.

A fault family proposes a :class:`~workbench.rules.fix.DraftRepair` (tensors renamed back, a
``d2t`` rebuilt from ``t2d``, an ``eagle_config`` written, config fields aligned with the target).
The user's draft is never changed: :func:`make_repaired_copy` writes a new directory on the box,
by default ``<state_dir>/repairs/<run-id>-<n>/``, journalled (:meth:`Journal.add_created`) before
anything is written, so that the run's ``finish``, ``workbench restore`` or
:func:`~workbench.session.journal.restore_box` after a kill removes it. The relaunch points
``--speculative-draft-model-path`` at :attr:`RepairedDraft.path`. :func:`keep_repaired_copy`
forgets it in the journal when the user asked to keep the fix; :func:`remove_repaired_copy`
removes it at once.

What the copy holds:

- ``config.json``: the source's, with the repair's top-level keys set (in place when the key
  exists, appended otherwise) and removed, key order kept, written with ``box.write_file``
  (atomic); a symlink to the source's when the repair does not touch the config;
- each safetensors file (``model.safetensors``, or the shards of ``model.safetensors.index.json``)
  that no change touches: a symlink to the source's (no copy of gigabytes);
- each file holding a renamed, replaced or transposed tensor (``DraftRepair.transposes``: a 2-D
  tensor read whole by the script, written ``[b, a]`` in place of ``[a, b]``, and compared byte for
  byte with the source's transposed on read-back), or receiving an added one: rewritten on the box
  by :data:`COPY_SCRIPT` (stdlib-only Python run with the box's interpreter, the plan as JSON on
  stdin). The data is streamed: ``os.copy_file_range`` (copied in the kernel, no user-space
  buffer; btrfs/XFS share extents only when the offsets are block-aligned, which a changed header
  length rarely leaves them) with an 8 MiB ``pread``/``pwrite`` fallback, so the script's memory
  is the plan (headers and the new tensors' bytes) plus at most one chunk, whatever the file size
  (about 12 MB peak RSS measured for a 160 MiB file);
- the index (sharded drafts): ``weight_map`` rewritten for renames and additions,
  ``metadata.total_size`` adjusted; a symlink when neither happens;
- everything else (tokenizer, README, sub-directories): symlinks.

A rewritten safetensors file is what the reference writer produces: 8-byte little-endian header
length, the JSON header (``__metadata__`` kept, entries in the source's order, renamed in place,
added ones last) padded with spaces to 8-byte alignment, then the data, contiguous. A rename
changes only header keys (the data section is copied unchanged); a replaced tensor of the same
dtype and shape is patched in place; one of another dtype or shape is dropped from its place and
appended, as are added tensors.

Validation comes before anything is written (:func:`plan_repaired_copy`, also usable as a dry
run): every renamed tensor exists, the new names do not collide, each ``TensorData`` dtype is a
safetensors dtype this module can encode and each value fits it, config keys are strings and the
removed ones exist. Problems raise :class:`~workbench.errors.DraftCopyError` (all of them at once,
``.problems``; ``.path`` the draft). After writing, the copy is read back through
:func:`workbench.checkpoint.read_checkpoint_tensors`: the expected names, dtypes and shapes, the
renamed names present and the old ones absent, the written tensors' bytes and values equal, the
ends of every renamed tensor's data equal to the source's; a copy that fails this is removed.

Layering: :mod:`remote`, :mod:`workbench.checkpoint`, :mod:`workbench.errors` and this package's
journal.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import numbers
import posixpath
import shlex
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from remote.errors import CommandTimedOut, RemoteError, RemoteFileNotFound, RemotePermissionError
from workbench.checkpoint import (
    DTYPE_BITS,
    SafetensorsHeader,
    TensorInfo,
    read_checkpoint_tensors,
    read_json_config,
    read_safetensors_header,
    read_tensor_data,
)
from workbench.errors import CheckpointError, DraftCopyError, JournalError
from workbench.session.journal import Journal

if TYPE_CHECKING:  # pragma: no cover
    from workbench.rules.fix import DraftRepair, TensorData

__all__ = ["COPY_SCRIPT", "ENCODABLE_DTYPES", "DraftCopyError", "DraftCopyPlan", "RepairedDraft", "encode_tensor",
           "keep_repaired_copy", "make_repaired_copy", "plan_repaired_copy", "remove_repaired_copy",
           "repairs_dir", "script_payload"]

log = logging.getLogger(__name__)

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
CONFIG_NAME = "config.json"

#: Bytes compared at each end of a renamed tensor's data when the copy is verified.
_VERIFY_ENDS = 4096

_INT_RANGES: dict[str, tuple[int, int]] = {
    "U8": (0, 2**8 - 1), "I8": (-2**7, 2**7 - 1), "U16": (0, 2**16 - 1), "I16": (-2**15, 2**15 - 1),
    "U32": (0, 2**32 - 1), "I32": (-2**31, 2**31 - 1), "U64": (0, 2**64 - 1), "I64": (-2**63, 2**63 - 1),
}
_NUMPY_INT = {"U8": "u1", "I8": "i1", "U16": "<u2", "I16": "<i2", "U32": "<u4", "I32": "<i4", "U64": "<u8",
              "I64": "<i8"}
_NUMPY_FLOAT = {"F16": "<f2", "F32": "<f4", "F64": "<f8"}

#: The safetensors dtypes a :class:`~workbench.rules.fix.TensorData` may have here (the 8-, 6- and
#: 4-bit floats and C64 are safetensors dtypes this module does not encode).
ENCODABLE_DTYPES = ("BOOL", *_INT_RANGES, "F16", "BF16", "F32", "F64")


# ---------------------------------------------------------------------------------------------
# The script run on the box
# ---------------------------------------------------------------------------------------------

#: Run on the box as ``python -c COPY_SCRIPT`` (stdlib only, Python 3.8+), the plan as JSON on
#: stdin: ``{"dest", "links": [{"name", "target"}], "files": [{"name", "source", "source_size",
#: "source_header_len", "header" (base64: the 8-byte length and the padded JSON), "pieces":
#: [{"offset", "length"} (a byte range of the source) | {"offset", "length", "transpose": [rows, cols,
#: itemsize]} (a 2-D tensor's range, written transposed: read whole, so the script holds two copies
#: of that one tensor) | {"blob": i}], "size"}], "blobs": [base64]}``,
#: optionally ``"kernel_copy": false`` (no ``copy_file_range``) and ``"chunk_bytes"`` (the fallback's
#: buffer, default 8 MiB).
#: Creates ``dest`` (refusing an existing one), the symlinks, then each file as a temporary file
#: in ``dest`` (fsynced, renamed into place; removed on failure), then fsyncs ``dest``. Checks each
#: source's size and header length against the plan first (a draft changed since it was read is
#: refused). Prints one JSON line: ``{"ok": true, "created_dir": true, "files": {name: {"bytes",
#: "copy"}}, "links": [...]}``, or ``{"ok": false, "error", "created_dir", "exists"}`` and exits 3.
COPY_SCRIPT = r'''
import base64, errno, json, os, sys

FALLBACK = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF, errno.EPERM,
            getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}
state = {"created_dir": False, "kernel": hasattr(os, "copy_file_range"), "chunk": 8 << 20}


def fail(message, exists=False):
    sys.stdout.write(json.dumps({"ok": False, "error": message, "created_dir": state["created_dir"],
                                 "exists": exists}) + "\n")
    sys.stdout.flush()
    sys.exit(3)


def pwrite_all(fd, data, pos):
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view, pos = view[n:], pos + n
    return len(data)


def copy_range(src, dst, offset, length, pos, source):
    how = "copy_file_range"
    while length > 0:
        if state["kernel"]:
            try:
                n = os.copy_file_range(src, dst, min(length, 1 << 30), offset, pos)
            except OSError as exc:
                if exc.errno not in FALLBACK:
                    raise
                state["kernel"] = False
                continue
        else:
            how = "read/write"
            buf = os.pread(src, min(length, state["chunk"]), offset)
            n = len(buf)
            if n:
                pwrite_all(dst, buf, pos)
        if n == 0:
            fail("%s ended at byte %d, before the %d bytes the plan copies from it" % (source, offset, length))
        offset, pos, length = offset + n, pos + n, length - n
    return how


def read_all(fd, offset, length, source):
    parts, got = [], 0
    while got < length:
        b = os.pread(fd, length - got, offset + got)
        if not b:
            fail("%s ended at byte %d, before the %d bytes the plan reads from it" % (source, offset + got, length))
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def transposed(data, rows, cols, size):
    # [rows, cols] of `size`-byte elements, C order -> [cols, rows]: byte k of every element of
    # source column j is data[j*size + k :: cols*size]; slices, no per-element Python loop
    out = bytearray(len(data))
    stride, width = cols * size, rows * size
    for j in range(cols):
        col = bytearray(width)
        for k in range(size):
            col[k::size] = data[j * size + k::stride]
        out[j * width:(j + 1) * width] = col
    return bytes(out)


def write_file(f, dest, blobs):
    src = os.open(f["source"], os.O_RDONLY)
    try:
        size = os.fstat(src).st_size
        if size != f["source_size"]:
            fail("%s is %d bytes, not the %d read when the copy was planned (changed since?)"
                 % (f["source"], size, f["source_size"]))
        head = os.pread(src, 8, 0)
        if len(head) != 8 or int.from_bytes(head, "little") != f["source_header_len"]:
            fail("%s: the header length changed since the copy was planned" % f["source"])
        tmp = os.path.join(dest, ".%s.ewb-tmp-%d" % (f["name"], os.getpid()))
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        how = "none"
        try:
            os.fchmod(out, os.fstat(src).st_mode & 0o7777)  # the source's permission bits, not the umask's
            pos = pwrite_all(out, base64.b64decode(f["header"]), 0)
            for piece in f["pieces"]:
                if "blob" in piece:
                    pos += pwrite_all(out, blobs[piece["blob"]], pos)
                elif "transpose" in piece:
                    rows, cols, size = piece["transpose"]
                    data = read_all(src, piece["offset"], piece["length"], f["source"])
                    pos += pwrite_all(out, transposed(data, rows, cols, size), pos)
                    how = "read, transposed, written" if how == "none" else how
                else:
                    how = copy_range(src, out, piece["offset"], piece["length"], pos, f["source"])
                    pos += piece["length"]
            if pos != f["size"]:
                fail("%s: wrote %d bytes, the plan says %d" % (f["name"], pos, f["size"]))
            os.fsync(out)
        except BaseException:
            os.close(out)
            os.unlink(tmp)
            raise
        os.close(out)
        os.rename(tmp, os.path.join(dest, f["name"]))
        return {"bytes": pos, "copy": how}
    finally:
        os.close(src)


def main():
    plan = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    state["kernel"] = state["kernel"] and plan.get("kernel_copy", True)
    state["chunk"] = int(plan.get("chunk_bytes", state["chunk"]))
    dest = plan["dest"]
    try:
        os.mkdir(dest, 0o755)
    except FileExistsError:
        fail("%s already exists" % dest, exists=True)
    state["created_dir"] = True
    result = {"ok": True, "created_dir": True, "files": {}, "links": []}
    for link in plan["links"]:
        os.symlink(link["target"], os.path.join(dest, link["name"]))
        result["links"].append(link["name"])
    blobs = [base64.b64decode(b) for b in plan["blobs"]]
    for f in plan["files"]:
        result["files"][f["name"]] = write_file(f, dest, blobs)
    dfd = os.open(dest, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    sys.stdout.write(json.dumps(result) + "\n")


try:
    main()
except OSError as exc:
    fail("%s: %s" % (type(exc).__name__, exc))
'''


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------


@dataclass
class RepairedDraft:
    """A repaired copy of the draft on the box.

    ``path``: the copy's directory (what ``--speculative-draft-model-path`` points at);
    ``source``: the user's draft directory (absolute, symlinks resolved; never changed);
    ``files_rewritten``: names in ``path`` written anew (``config.json``, safetensors files, the
    index); ``files_linked``: names that are symlinks to the source's; ``actions``: one line per
    change (the repair's reasons, then what was done); ``checks``: what the read-back verified;
    ``bytes_written``: bytes of the rewritten files (symlinks count nothing); ``kept``: forgotten
    in the journal (the copy outlives the run); ``duration_s``: wall time of the copy.
    """

    path: str
    source: str
    files_rewritten: list[str]
    files_linked: list[str]
    actions: list[str]
    bytes_written: int
    checks: list[str] = field(default_factory=list)
    kept: bool = False
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict for the verdict (every field)."""
        return {"path": self.path, "source": self.source, "files_rewritten": list(self.files_rewritten),
                "files_linked": list(self.files_linked), "actions": list(self.actions),
                "checks": list(self.checks), "bytes_written": self.bytes_written, "kept": self.kept,
                "duration_s": round(self.duration_s, 3)}


@dataclass
class _FilePlan:
    """One safetensors file of the copy to rewrite."""

    name: str                      # file name in the draft directory
    source: str                    # its absolute path in the source
    source_size: int
    source_header_len: int
    header: bytes                  # 8-byte length + padded JSON
    pieces: list[dict]             # {"offset", "length"} of the source, or {"blob": i}
    size: int                      # bytes of the new file

    def to_script(self) -> dict:
        return {"name": self.name, "source": self.source, "source_size": self.source_size,
                "source_header_len": self.source_header_len, "header": base64.b64encode(self.header).decode("ascii"),
                "pieces": self.pieces, "size": self.size}


@dataclass
class DraftCopyPlan:
    """What :func:`make_repaired_copy` will write, validated (:func:`plan_repaired_copy`).

    ``source``: the draft directory (absolute); ``actions``: one line per change; ``files``: the
    safetensors files to rewrite; ``links``: names to symlink; ``config_text`` / ``index_text``:
    the new ``config.json`` / index (``None``: linked); ``config``: the new config as a dict;
    ``expected``: every tensor of the copy, ``name -> (dtype, shape, file name)``; ``written`` /
    ``values``: name -> the bytes written for it / its ``TensorData`` (replaced and added
    tensors); ``renamed``: new name -> (old name, source ``TensorInfo``) for tensors whose data is
    copied; ``removed``: source names the copy must not have; ``blobs``: the new tensors' bytes
    in the order the script's pieces name them. ``files_rewritten``: names written anew;
    ``bytes_to_write``: their total size in bytes.
    """

    source: str
    actions: list[str]
    files: list[_FilePlan]
    links: list[str]
    config_text: str | None
    config: dict | None
    index_text: str | None
    expected: dict[str, tuple[str, tuple[int, ...], str]]
    written: dict[str, bytes]
    values: dict[str, Any]
    renamed: dict[str, tuple[str, TensorInfo]]
    removed: list[str]
    blobs: list[bytes]
    transposed: dict[str, tuple[str, TensorInfo]] = field(default_factory=dict)

    @property
    def files_rewritten(self) -> list[str]:
        """Names in the copy written anew (sorted): the rewritten safetensors files, ``config.json``
        and the index when they change."""
        names = [f.name for f in self.files]
        if self.config_text is not None:
            names.append(CONFIG_NAME)
        if self.index_text is not None:
            names.append(INDEX_NAME)
        return sorted(names)

    @property
    def bytes_to_write(self) -> int:
        """Bytes of every file written anew (symlinks count nothing)."""
        return (sum(f.size for f in self.files) + len((self.config_text or "").encode("utf-8"))
                + len((self.index_text or "").encode("utf-8")))


# ---------------------------------------------------------------------------------------------
# Encoding tensors
# ---------------------------------------------------------------------------------------------


def encode_tensor(name: str, data: "TensorData") -> bytes:
    """The little-endian bytes of ``data`` (a :class:`~workbench.rules.fix.TensorData`: ``dtype``,
    ``shape``, flat C-order ``values``), as a safetensors data section holds them: ``prod(shape)``
    elements of ``DTYPE_BITS[dtype] / 8`` bytes. BOOL takes ``True``/``False``/0/1; the integer
    dtypes integers in their range (no floats, no bools); F16/BF16/F32/F64 real numbers whose
    magnitude the dtype can hold (inf and nan are kept; BF16 rounds to nearest even).

    Raises :class:`DraftCopyError` naming the tensor, the dtype and the first offending value
    (``.path`` is the tensor name here; :func:`plan_repaired_copy` adds the draft)."""
    dtype = data.dtype
    if dtype not in DTYPE_BITS:
        raise DraftCopyError(f"tensor {name!r}: {dtype!r} is not a safetensors dtype "
                             f"(one of {', '.join(DTYPE_BITS)})", path=name)
    if dtype not in ENCODABLE_DTYPES:
        raise DraftCopyError(f"tensor {name!r}: cannot write dtype {dtype} (writable: {', '.join(ENCODABLE_DTYPES)})",
                             path=name)
    shape = tuple(data.shape)
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise DraftCopyError(f"tensor {name!r}: shape {list(shape)} is not a list of non-negative integers", path=name)
    values = list(data.values)
    if len(values) != math.prod(shape):
        raise DraftCopyError(f"tensor {name!r}: {len(values)} values for shape {list(shape)}", path=name)

    def bad(i: int, why: str) -> DraftCopyError:
        return DraftCopyError(f"tensor {name!r}: value [{i}] = {values[i]!r} {why}", path=name)

    if dtype == "BOOL":
        for i, v in enumerate(values):
            if not (isinstance(v, (bool, np.bool_)) or (isinstance(v, numbers.Integral) and v in (0, 1))):
                raise bad(i, "is not a boolean (True/False/0/1) for BOOL")
        return np.asarray([bool(v) for v in values], dtype="?").tobytes()
    if dtype in _INT_RANGES:
        lo, hi = _INT_RANGES[dtype]
        for i, v in enumerate(values):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
                raise bad(i, f"is not an integer, and {dtype} holds integers")
            if not lo <= int(v) <= hi:
                raise bad(i, f"does not fit {dtype} ({lo}..{hi})")
        return np.asarray([int(v) for v in values], dtype=_NUMPY_INT[dtype]).tobytes()
    for i, v in enumerate(values):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            raise bad(i, f"is not a real number, and {dtype} holds floats")
    wide = np.asarray([float(v) for v in values], dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "BF16":
            f32 = wide.astype(np.float32)
            bits = f32.view(np.uint32).astype(np.uint64)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            nan = np.isnan(f32)
            rounded[nan] = ((bits[nan] >> 16).astype(np.uint16) & 0x8000) | 0x7FC0
            back = (rounded.astype(np.uint32) << 16).view(np.float32)
            raw = rounded.astype("<u2").tobytes()
        else:
            narrow = wide.astype(_NUMPY_FLOAT[dtype])
            back, raw = narrow, narrow.tobytes()
    overflow = np.flatnonzero(np.isinf(back) & np.isfinite(wide))
    if overflow.size:
        raise bad(int(overflow[0]), f"is too large for {dtype}")
    return raw


# ---------------------------------------------------------------------------------------------
# Planning (reads only)
# ---------------------------------------------------------------------------------------------


def _header_bytes(entries: dict[str, dict], metadata: dict | None) -> bytes:
    """8-byte little-endian length + the JSON header (compact, as the reference writer emits it)
    padded with spaces to a multiple of 8 bytes."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    header.update(entries)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    n = len(text) + (-len(text)) % 8
    return n.to_bytes(8, "little") + text + b" " * (n - len(text))


def _config_text(config: dict) -> str:
    return json.dumps(config, indent=2, ensure_ascii=False) + "\n"


def _problems_error(where: str, problems: list[str]) -> DraftCopyError:
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    return DraftCopyError(f"the repair does not fit the draft ({count})", path=where, problems=problems)


def _plan_config(box, source: str, repair: "DraftRepair", actions: list[str], problems: list[str],
                 where: str, timeout: float) -> dict | None:
    """``config.json`` with the repair's keys removed and set (existing keys keep their place, new
    ones are appended), or ``None`` when the repair leaves the config alone."""
    if not (repair.config or repair.config_remove):
        return None
    try:
        config = read_json_config(box, posixpath.join(source, CONFIG_NAME), timeout=timeout)
    except CheckpointError as exc:
        raise DraftCopyError(f"cannot change the config: {exc}", path=where) from exc
    for key in repair.config_remove:
        if key in repair.config:
            problems.append(f"config key {key!r} is both set and removed")
        elif key not in config:
            problems.append(f"config_remove names {key!r}, which {CONFIG_NAME} does not have")
        else:
            del config[key]
            actions.append(f"removed {key!r} from {CONFIG_NAME}")
    for key, value in repair.config.items():
        if not isinstance(key, str):
            problems.append(f"config key {key!r} is not a string")
            continue
        try:
            shown = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            problems.append(f"config key {key!r}: value {value!r} is not JSON ({exc})")
            continue
        was = json.dumps(config[key], ensure_ascii=False) if key in config else "absent"
        config[key] = value
        actions.append(f"set {key!r} in {CONFIG_NAME} to {shown if len(shown) <= 160 else shown[:157] + '...'}"
                       f" (was {was if len(was) <= 160 else was[:157] + '...'})")
    return config


def _read_source_checkpoint(box, source: str, entries: list[str], where: str,
                            timeout: float) -> tuple[dict[str, SafetensorsHeader], dict | None]:
    """The source's safetensors headers by file name (the single file, else the index's shards)
    and the index as read (``None`` for a single file)."""
    index_raw = None
    try:
        if SINGLE_NAME in entries:
            names = [SINGLE_NAME]
        elif INDEX_NAME in entries:
            index_path = posixpath.join(source, INDEX_NAME)
            index_raw = read_json_config(box, index_path, timeout=timeout)
            wm = index_raw.get("weight_map")
            if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
                raise DraftCopyError(f"{INDEX_NAME} has no weight_map of {{tensor: shard file}}", path=index_path)
            names = sorted(set(wm.values()))
        else:
            raise DraftCopyError(f"no {SINGLE_NAME} or {INDEX_NAME}: no tensors to repair", path=where)
        headers = {n: read_safetensors_header(box, posixpath.join(source, n), timeout=timeout) for n in names}
    except CheckpointError as exc:
        raise DraftCopyError(f"cannot read the draft's checkpoint: {exc}", path=where) from exc
    return headers, index_raw


def _resolve_renames(renames: Mapping[str, str], owner: Mapping[str, str], problems: list[str]) -> dict[str, str]:
    """Every source tensor -> its name in the copy; a rename of a missing tensor, to a non-name,
    to itself, or to a name the copy would then hold twice is a problem."""
    final_of = {t: t for t in owner}
    for old, new in renames.items():
        if old not in owner:
            problems.append(f"cannot rename {old!r}: no such tensor in the checkpoint "
                            f"({', '.join(sorted(set(owner.values())))})")
        elif not isinstance(new, str) or not new or new == "__metadata__":
            problems.append(f"cannot rename {old!r} to {new!r}: not a tensor name")
        elif new == old:
            problems.append(f"renames {old!r} to itself")
        else:
            final_of[old] = new
    holder: dict[str, str] = {}  # name in the copy -> source tensor
    for old, new in final_of.items():
        if new not in holder:
            holder[new] = old
            continue
        first, second = (holder[new], old) if holder[new] in renames else (old, holder[new])
        what = "a tensor renamed to it" if second in renames else "a tensor of that name"
        problems.append(f"cannot rename {first!r} to {new!r}: the checkpoint already has {what} ({second!r})")
    return final_of


class _FileWriter:
    """Lays out one rewritten safetensors file: the entries (source order, renamed in place),
    the pieces (source byte ranges, merged when adjacent, and blobs), contiguous offsets."""

    def __init__(self, plan_blobs: list[bytes]):
        self.blobs = plan_blobs
        self.entries: dict[str, dict] = {}
        self.pieces: list[dict] = []
        self.pos = 0

    def copy(self, name: str, info: TensorInfo) -> None:
        self.entries[name] = {"dtype": info.dtype, "shape": list(info.shape),
                              "data_offsets": [self.pos, self.pos + info.nbytes]}
        start = info.data_start + info.data_offsets[0]
        last = self.pieces[-1] if self.pieces else None
        if last is not None and "offset" in last and "transpose" not in last and \
                last["offset"] + last["length"] == start:
            last["length"] += info.nbytes
        else:
            self.pieces.append({"offset": start, "length": info.nbytes})
        self.pos += info.nbytes

    def transpose(self, name: str, info: TensorInfo, itemsize: int) -> None:
        """``info``'s data written transposed (``[a, b]`` → ``[b, a]``; same bytes, moved)."""
        rows, cols = info.shape
        self.entries[name] = {"dtype": info.dtype, "shape": [cols, rows],
                              "data_offsets": [self.pos, self.pos + info.nbytes]}
        self.pieces.append({"offset": info.data_start + info.data_offsets[0], "length": info.nbytes,
                            "transpose": [rows, cols, itemsize]})
        self.pos += info.nbytes

    def blob(self, name: str, data: "TensorData", raw: bytes) -> None:
        self.entries[name] = {"dtype": data.dtype, "shape": list(data.shape),
                              "data_offsets": [self.pos, self.pos + len(raw)]}
        self.pieces.append({"blob": len(self.blobs)})
        self.blobs.append(raw)
        self.pos += len(raw)


def plan_repaired_copy(box, draft_dir: str, repair: "DraftRepair", *, timeout: float = 60.0) -> DraftCopyPlan:
    """Validate ``repair`` against the draft ``draft_dir`` on ``box`` and plan the copy, reading
    only ``config.json``, the index and the safetensors headers (byte ranges). Nothing is written:
    this is also the dry run of a ``draft-copy`` fix.

    Names in ``repair.tensors`` are those of the copy, after the renames: a name the copy has is
    replaced (in place when dtype and shape are the same, else appended), any other is added (to
    the single file; of shards, to the smallest one already rewritten, else the smallest).
    ``timeout``: seconds per box call.

    Raises :class:`DraftCopyError` (``.path`` the draft, ``.problems`` every problem found): an
    empty repair, a draft directory or config that cannot be read, a renamed tensor that is not in
    the checkpoint, a new name that collides, a dtype that is no safetensors dtype or cannot be
    written, a value that does not fit, a removed config key that is not there. Box errors
    (``remote.errors.RemoteError``) propagate.
    """
    where = draft_dir
    if repair.empty:
        raise DraftCopyError("the repair changes nothing: no copy to make", path=where)
    try:
        source = box.realpath(draft_dir, timeout=timeout)
        if not box.stat(source, timeout=timeout).is_dir:
            raise DraftCopyError("the draft is not a directory", path=where)
        entries = box.listdir(source, timeout=timeout)
    except (RemoteFileNotFound, RemotePermissionError) as exc:
        raise DraftCopyError(f"cannot read the draft directory ({exc})", path=where) from exc
    problems: list[str] = []
    actions = [f"why: {r}" for r in repair.reasons]
    config = _plan_config(box, source, repair, actions, problems, where, timeout)
    plan = DraftCopyPlan(source, actions, [], [], None if config is None else _config_text(config), config, None,
                         {}, {}, {}, {}, [], [])
    if repair.renames or repair.tensors or repair.transposes:
        _plan_tensors(box, plan, repair, entries, problems, where, timeout)
    if problems:
        raise _problems_error(where, problems)
    own = {f.name for f in plan.files} | ({CONFIG_NAME} if plan.config_text is not None else set()) | (
        {INDEX_NAME} if plan.index_text is not None else set())
    plan.links = [e for e in entries if e not in own]
    plan.removed = sorted(set(plan.removed) - set(plan.expected))
    return plan


def _plan_tensors(box, plan: DraftCopyPlan, repair: "DraftRepair", entries: list[str], problems: list[str],
                  where: str, timeout: float) -> None:
    """Fill ``plan`` with the rewritten safetensors files, the index and what to verify."""
    headers, index_raw = _read_source_checkpoint(box, plan.source, entries, where, timeout)
    if index_raw is not None:
        for name, shard in index_raw["weight_map"].items():
            if name not in headers[shard]:
                problems.append(f"{INDEX_NAME} maps {name!r} to {shard}, whose header does not hold it")
    owner: dict[str, str] = {}  # source tensor -> its file
    for fname, header in headers.items():
        for tname in header:
            if tname in owner:
                problems.append(f"tensor {tname!r} is in both {owner[tname]} and {fname}")
            owner[tname] = fname
    final_of = _resolve_renames(repair.renames, owner, problems)
    encoded: dict[str, bytes] = {}
    for tname, data in repair.tensors.items():
        if not isinstance(tname, str) or not tname or tname == "__metadata__":
            problems.append(f"cannot write a tensor named {tname!r}")
            continue
        try:
            encoded[tname] = encode_tensor(tname, data)
        except DraftCopyError as exc:
            problems.append(exc.message)
    if problems:
        raise _problems_error(where, problems)

    source_of = {new: old for old, new in final_of.items()}  # name in the copy -> source tensor
    itemsize: dict[str, int] = {}  # tensors written transposed (names in the copy) -> bytes per element
    for tname in repair.transposes:
        old = source_of.get(tname)
        info = headers[owner[old]][old] if old is not None else None
        if info is None:
            problems.append(f"cannot transpose {tname!r}: no such tensor in the copy")
        elif tname in encoded:
            problems.append(f"cannot transpose {tname!r}: the repair also writes it")
        elif len(info.shape) != 2 or 0 in info.shape or info.nbytes % (info.shape[0] * info.shape[1]):
            problems.append(f"cannot transpose {tname!r}: shape {list(info.shape)} ({info.dtype}) is not a 2-D "
                            "tensor of whole-byte elements")
        else:
            itemsize[tname] = info.nbytes // (info.shape[0] * info.shape[1])
    if problems:
        raise _problems_error(where, problems)
    added = [t for t in encoded if t not in source_of]
    touched = {owner[o] for o, n in final_of.items() if n != o or n in encoded or n in itemsize}
    add_to = min(touched or headers, key=lambda n: (headers[n].file_size, n)) if added else None
    for fname, header in headers.items():
        mine_added = added if fname == add_to else []
        if fname not in touched and not mine_added:
            plan.expected.update({t: (i.dtype, i.shape, fname) for t, i in header.items()})
            continue
        if "/" in fname:
            raise DraftCopyError(f"shard {fname} is in a sub-directory: rewriting it is not supported", path=where)
        out = _FileWriter(plan.blobs)
        appended: list[str] = []
        for old in sorted(header, key=lambda t: header[t].data_offsets):
            info, new = header[old], final_of[old]
            if new != old:
                plan.removed.append(old)
            if new in itemsize:
                out.transpose(new, info, itemsize[new])
                plan.transposed[new] = (old, info)
                plan.actions.append(f"transposed {old!r} {list(info.shape)} -> {new!r} {list(info.shape)[::-1]} in "
                                    f"{fname} (data read and written transposed)")
                if new != old:
                    plan.removed.append(old)
                continue
            if new not in encoded:
                out.copy(new, info)
                if new != old:
                    plan.renamed[new] = (old, info)
                    plan.actions.append(f"renamed {old!r} -> {new!r} in {fname} (header only: data copied unchanged)")
                continue
            if new != old:
                plan.actions.append(f"renamed {old!r} -> {new!r} in {fname}")
            data = repair.tensors[new]
            if data.dtype == info.dtype and tuple(data.shape) == info.shape:
                out.blob(new, data, encoded[new])
                plan.actions.append(f"replaced {new!r} ({info.dtype} {list(info.shape)}) in place in {fname}")
            else:
                appended.append(new)
                plan.actions.append(f"replaced {new!r} ({info.dtype} {list(info.shape)} -> {data.dtype} "
                                    f"{list(data.shape)}) in {fname}: old data dropped, new data appended")
        for tname in appended + mine_added:
            out.blob(tname, repair.tensors[tname], encoded[tname])
        for tname in mine_added:
            data = repair.tensors[tname]
            plan.actions.append(f"added {tname!r} ({data.dtype} {list(data.shape)}) to {fname}")
        # the source's entry order (renamed in place), the added ones last
        ordered = {t: out.entries[t] for t in [final_of[o] for o in header] + mine_added}
        head = _header_bytes(ordered, header.metadata)
        plan.files.append(_FilePlan(fname, posixpath.join(plan.source, fname), header.file_size, header.header_size,
                                    head, out.pieces, len(head) + out.pos))
        plan.expected.update({t: (e["dtype"], tuple(e["shape"]), fname) for t, e in ordered.items()})
    for tname, raw in encoded.items():
        plan.written[tname] = raw
        plan.values[tname] = repair.tensors[tname]

    if index_raw is not None and (any(n != o for o, n in final_of.items()) or added):
        index_out = dict(index_raw)
        index_out["weight_map"] = {final_of.get(t, t): f for t, f in index_raw["weight_map"].items()}
        index_out["weight_map"].update({t: add_to for t in added})
        meta = index_out.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("total_size"), int) and not isinstance(
                meta.get("total_size"), bool):
            delta = sum(f.size - len(f.header) for f in plan.files) - sum(
                headers[f.name][t].nbytes for f in plan.files for t in headers[f.name])
            index_out["metadata"] = {**meta, "total_size": meta["total_size"] + delta}
        plan.index_text = json.dumps(index_out, indent=2, ensure_ascii=False) + "\n"
        plan.actions.append(f"rewrote {INDEX_NAME}: weight_map"
                            + (f" with {len(repair.renames)} renamed" if repair.renames else "")
                            + (f"{',' if repair.renames else ''} {len(added)} added to {add_to}" if added else ""))


# ---------------------------------------------------------------------------------------------
# Making the copy
# ---------------------------------------------------------------------------------------------


def repairs_dir(box) -> str:
    """Where repaired copies go by default: ``<box.state_dir>/repairs``."""
    return f"{str(box.state_dir).rstrip('/')}/repairs"


def _default_dest(box, journal: Journal, timeout: float) -> str:
    run_id = str(journal.data.get("run_id") or uuid.uuid4().hex[:12])
    taken = set(journal.data.get("created_paths") or [])
    base = repairs_dir(box)
    n = 1
    while f"{base}/{run_id}-{n}" in taken or box.exists(f"{base}/{run_id}-{n}", timeout=timeout):
        n += 1
    return f"{base}/{run_id}-{n}"


def make_repaired_copy(box, journal: Journal, draft_dir: str, repair: "DraftRepair", *, python: str | None = None,
                       dest_dir: str | None = None, keep: bool = False, timeout: float = 1800.0,
                       io_timeout: float = 60.0) -> RepairedDraft:
    """Make a repaired copy of the draft ``draft_dir`` on ``box`` and prove it.

    ``repair``: a :class:`~workbench.rules.fix.DraftRepair` (see :func:`plan_repaired_copy` for how
    its names are read). ``journal``: the run's :class:`~workbench.session.journal.Journal` on that
    box; the copy's directory is recorded there (``add_created``) before anything is written, so
    ``restore_box`` removes it after a kill. ``dest_dir``: the copy's directory, which must not
    exist and must lie under ``box.state_dir`` (default ``<state_dir>/repairs/<run-id>-<n>``).
    ``python``: the box's interpreter for :data:`COPY_SCRIPT` (stdlib only; default
    ``box.python``). ``keep``: forget the copy in the journal once it is made and verified (it
    outlives the run; a failure still removes it). ``timeout``: seconds for the script that
    writes the files (it streams gigabytes); ``io_timeout``: seconds for each other box call.

    Returns a :class:`RepairedDraft`. The user's draft is only read. Raises
    :class:`DraftCopyError` when the repair does not fit the draft (nothing written), when the
    script fails or times out, or when the read-back does not match the plan; the partial copy is
    removed then (and stays journalled, for ``restore_box``, if even that fails). A
    ``remote.errors.RemoteError`` from the box propagates after the same clean-up.
    """
    started = time.monotonic()
    python = python or getattr(box, "python", None) or "python3"
    plan = plan_repaired_copy(box, draft_dir, repair, timeout=io_timeout)
    state_prefix = str(box.state_dir).rstrip("/") + "/"
    default = dest_dir is None
    for attempt in range(3):
        dest = _default_dest(box, journal, io_timeout) if default else posixpath.normpath(box.expand_path(dest_dir))
        if not dest.startswith(state_prefix):
            raise DraftCopyError(f"the copy must go under the box's state dir {box.state_dir} (restore removes only "
                                 "what lies there)", path=dest)
        if box.exists(dest, timeout=io_timeout):
            raise DraftCopyError("the copy's directory already exists (refusing to write into it)", path=dest)
        box.makedirs(posixpath.dirname(dest), timeout=io_timeout)
        try:
            journal.add_created(dest)  # before anything is written: restore_box removes it after a kill
        except JournalError as exc:
            raise DraftCopyError(f"cannot journal the copy ({exc})", path=dest) from exc
        try:
            report = _write_copy(box, plan, dest, python, timeout, io_timeout)
        except _DirTaken:
            journal.remove_created(dest)  # someone else's directory: never removed
            if default and attempt < 2:
                continue
            raise DraftCopyError("the copy's directory appeared while it was being made (refusing to write into it)",
                                 path=dest) from None
        except BaseException as exc:
            _discard(box, journal, dest, io_timeout, exc)
            raise
        break
    try:
        checks = _verify(box, plan, dest, io_timeout)
    except BaseException as exc:
        _discard(box, journal, dest, io_timeout, exc)
        raise
    actions = list(plan.actions)
    linked = sorted(report.get("links") or [])
    if linked:
        actions.append(f"linked {len(linked)} unchanged file{'s' if len(linked) != 1 else ''} to the source: "
                       + ", ".join(linked))
    for name, info in sorted((report.get("files") or {}).items()):
        how = info.get("copy")
        actions.append(f"wrote {name} ({info.get('bytes')} bytes; "
                       + (f"source data copied by {how})" if how != "none" else "no source data copied)"))
    result = RepairedDraft(dest, plan.source, plan.files_rewritten, linked, actions, plan.bytes_to_write, checks,
                           duration_s=time.monotonic() - started)
    if keep:
        keep_repaired_copy(journal, result)
    log.info("repaired copy of %s at %s: %d file(s) rewritten, %d linked", plan.source, dest,
             len(result.files_rewritten), len(linked))
    return result


class _DirTaken(Exception):
    """The script found the destination directory already there (it created nothing)."""


def script_payload(plan: DraftCopyPlan, dest: str) -> dict:
    """The JSON :data:`COPY_SCRIPT` reads on stdin to write ``plan`` into ``dest`` (the symlinks
    and the safetensors files; ``config.json`` and the index are written by the caller)."""
    return {"dest": dest,
            "links": [{"name": n, "target": posixpath.join(plan.source, n)} for n in plan.links],
            "files": [f.to_script() for f in plan.files],
            "blobs": [base64.b64encode(b).decode("ascii") for b in plan.blobs]}


def _write_copy(box, plan: DraftCopyPlan, dest: str, python: str, timeout: float, io_timeout: float) -> dict:
    """Run :data:`COPY_SCRIPT`, then write config.json and the index. Returns the script's answer."""
    payload = script_payload(plan, dest)
    try:
        res = box.run([python, "-B", "-c", COPY_SCRIPT], stdin=json.dumps(payload), timeout=timeout, check=False)
    except CommandTimedOut as exc:
        raise DraftCopyError(f"writing the copy took longer than {timeout:g} s ({python} on {box.name}); "
                             "pass a larger timeout", path=dest) from exc
    answer = None
    for line in reversed(res.stdout.strip().splitlines()):
        try:
            answer = json.loads(line)
            break
        except json.JSONDecodeError:
            continue
    if res.exit_code != 0 or not isinstance(answer, dict) or not answer.get("ok"):
        if isinstance(answer, dict) and answer.get("exists") is True and answer.get("created_dir") is False:
            raise _DirTaken()
        why = answer.get("error") if isinstance(answer, dict) else None
        if not why:
            why = next((ln.strip() for ln in reversed(res.stderr.strip().splitlines()) if ln.strip()),
                       "no error output")
        raise DraftCopyError(f"the copy script failed (exit {res.exit_code}, {shlex.quote(python)} on {box.name}): "
                             f"{why}", path=dest)
    if plan.config_text is not None:
        box.write_file(posixpath.join(dest, CONFIG_NAME), plan.config_text, timeout=io_timeout)
    if plan.index_text is not None:
        box.write_file(posixpath.join(dest, INDEX_NAME), plan.index_text, timeout=io_timeout)
    return answer


def _verify(box, plan: DraftCopyPlan, dest: str, timeout: float) -> list[str]:
    """Read the copy back and compare it with the plan; returns what was checked. Raises
    :class:`DraftCopyError` listing every mismatch."""
    checks: list[str] = []
    problems: list[str] = []
    if plan.config is not None:
        try:
            got = read_json_config(box, posixpath.join(dest, CONFIG_NAME), timeout=timeout)
        except CheckpointError as exc:
            raise DraftCopyError(f"the copy's config cannot be read back: {exc}", path=dest) from exc
        if list(got.items()) != list(plan.config.items()):
            problems.append(f"{CONFIG_NAME} read back differs from the one written")
        else:
            checks.append(f"{CONFIG_NAME} read back: {len(got)} keys as planned, in order")
    if plan.expected:
        try:
            tensors = read_checkpoint_tensors(box, dest, timeout=timeout)
        except CheckpointError as exc:
            raise DraftCopyError(f"the copy's checkpoint cannot be read back: {exc}", path=dest) from exc
        missing = sorted(set(plan.expected) - set(tensors))
        extra = sorted(set(tensors) - set(plan.expected))
        if missing:
            problems.append(f"tensors missing from the copy: {', '.join(missing)}")
        if extra:
            problems.append(f"unexpected tensors in the copy: {', '.join(extra)}")
        for name, (dtype, shape, fname) in plan.expected.items():
            info = tensors.get(name)
            if info is None:
                continue
            if (info.dtype, info.shape) != (dtype, shape) or posixpath.basename(info.file) != posixpath.basename(fname):
                problems.append(f"{name!r}: {info.dtype} {list(info.shape)} in {posixpath.basename(info.file)}, "
                                f"planned {dtype} {list(shape)} in {fname}")
        if not missing and not extra:
            checks.append(f"headers read back: {len(tensors)} tensors, names, dtypes and shapes as planned")
        still = [old for old in plan.removed if old in tensors]
        if still:
            problems.append(f"old names still in the copy: {', '.join(still)}")
        for new, (old, src) in plan.renamed.items():
            info = tensors.get(new)
            if info is None:
                continue
            ends = _ends(box, src, timeout) == _ends(box, info, timeout)
            if not ends:
                problems.append(f"{new!r}: data differs from the source's {old!r}")
            else:
                checks.append(f"renamed {old!r} -> {new!r}: present, old name absent, data ends equal to the source's")
        for new, (old, src) in plan.transposed.items():
            info = tensors.get(new)
            if info is None:
                continue
            if _transposed_equal(box, src, info, timeout):
                checks.append(f"{new!r} {list(info.shape)}: byte for byte the source's {old!r} "
                              f"{list(src.shape)} transposed")
            else:
                problems.append(f"{new!r}: the data read back is not the source's {old!r} transposed")
        for name, raw in plan.written.items():
            info = tensors.get(name)
            if info is None:
                continue
            got_raw = box.read_bytes(info.file, info.data_start + info.data_offsets[0], info.nbytes, timeout=timeout)
            if got_raw != raw:
                problems.append(f"{name!r}: the bytes read back differ from those written")
                continue
            if _values_equal(box, info, name, plan.values[name], timeout):
                checks.append(f"{name!r} ({info.dtype} {list(info.shape)}): bytes and values read back equal to "
                              "those written")
            else:
                problems.append(f"{name!r}: values read back differ from those written")
    if problems:
        raise DraftCopyError("the copy does not read back as planned", path=dest, problems=problems)
    return checks


def _values_equal(box, info: TensorInfo, name: str, data: "TensorData", timeout: float) -> bool:
    """The tensor read back (``read_tensor_data``, numpy) equals ``data.values``: exactly for
    integers and booleans, and for floats equal to the values rounded to the dtype (nan where nan)."""
    got = read_tensor_data(box, info, name=name, max_bytes=max(info.nbytes, 1), timeout=timeout).reshape(-1)
    if data.dtype in _NUMPY_FLOAT or data.dtype == "BF16":
        wide = np.asarray([float(v) for v in data.values], dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            if data.dtype == "BF16":  # read_tensor_data widens BF16 to float32 exactly: compare there
                want = np.frombuffer(encode_tensor(name, data), dtype="<u2").astype(np.uint32) << 16
                want = want.view(np.float32)
                close = np.isclose(want.astype(np.float64), wide, rtol=2.0 ** -8, atol=0.0, equal_nan=True)
            else:
                want = wide.astype(_NUMPY_FLOAT[data.dtype])
                close = np.ones(want.shape, dtype=bool)
        return bool(close.all()) and np.array_equal(got, want, equal_nan=True)
    want = np.asarray([bool(v) if data.dtype == "BOOL" else int(v) for v in data.values], dtype=got.dtype)
    return want.shape == got.shape and bool(np.all(got == want))


def _transposed_equal(box, src: TensorInfo, got: TensorInfo, timeout: float) -> bool:
    """The copy's ``got`` holds exactly the bytes of the source's ``src`` transposed (each element
    compared as raw bytes: no dtype conversion, NaN payloads included)."""
    rows, cols = src.shape
    if got.shape != (cols, rows) or got.nbytes != src.nbytes:
        return False
    size = src.nbytes // (rows * cols)
    a = box.read_bytes(src.file, src.data_start + src.data_offsets[0], src.nbytes, timeout=timeout)
    b = box.read_bytes(got.file, got.data_start + got.data_offsets[0], got.nbytes, timeout=timeout)
    want = np.frombuffer(a, dtype=f"V{size}").reshape(rows, cols).T.tobytes()
    return want == b


def _ends(box, info: TensorInfo, timeout: float) -> tuple[bytes, bytes]:
    start = info.data_start + info.data_offsets[0]
    n = min(info.nbytes, _VERIFY_ENDS)
    return (box.read_bytes(info.file, start, n, timeout=timeout),
            box.read_bytes(info.file, start + info.nbytes - n, n, timeout=timeout))


def _discard(box, journal: Journal, dest: str, timeout: float, cause: BaseException) -> None:
    """Remove a copy that failed half-way, and forget it in the journal; when removing fails the
    journal keeps it (``restore_box`` retries) and the failure is logged beside ``cause``."""
    try:
        res = box.run(["rm", "-rf", "--", dest], timeout=max(timeout, 60), check=False)
        if res.exit_code != 0:
            log.warning("could not remove the failed copy %s (%s); it stays journalled for restore_box",
                        dest, res.stderr.strip()[-200:])
            return
        journal.remove_created(dest)
    except (RemoteError, JournalError) as exc:
        log.warning("could not remove the failed copy %s after %s (%s); it stays journalled for restore_box",
                    dest, type(cause).__name__, exc)


def keep_repaired_copy(journal: Journal, copy: RepairedDraft) -> RepairedDraft:
    """Forget ``copy`` in the journal so that restoring the box leaves it (the user asked to keep
    the fix); returns it with ``kept`` set. Raises ``remote.errors.RemoteError`` when the journal
    cannot be written."""
    journal.remove_created(copy.path)
    copy.kept = True
    return copy


def remove_repaired_copy(box, journal: Journal, copy: RepairedDraft | str, *, timeout: float = 60.0) -> None:
    """Remove a repaired copy now (its directory: symlinks and rewritten files; the source is never
    touched) and forget it in the journal. Refuses a path outside ``box.state_dir``. Raises
    :class:`DraftCopyError` when it cannot be removed (it stays journalled)."""
    path = copy.path if isinstance(copy, RepairedDraft) else str(copy)
    if not path.startswith(str(box.state_dir).rstrip("/") + "/"):
        raise DraftCopyError(f"not under the box's state dir {box.state_dir}: not removed", path=path)
    res = box.run(["rm", "-rf", "--", path], timeout=timeout, check=False)
    if res.exit_code != 0:
        raise DraftCopyError(f"could not remove the copy: {res.stderr.strip()[-200:]}", path=path)
    journal.remove_created(path)
    if isinstance(copy, RepairedDraft):
        copy.kept = False

