"""The probe record: :class:`Probe` (what the journal holds about one probe, and its JSON), the
tag rule :data:`TAG_RE` and the defaults :data:`MAX_PRINTS` / :data:`MAX_REPR`.

Plain data, no box and no I/O. Imports only the standard library; every other module of
``remote.probes`` may import it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Optional, Union

TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

#: Default of ``max_prints``: lines a ``once_per`` probe prints per process at most.
MAX_PRINTS = 8

#: Default of ``max_repr``: the longest repr (characters) a probe prints for one value; longer ones
#: are cut and end in "...".
MAX_REPR = 2000


@dataclass(frozen=True)
class Probe:
    """A probe recorded in the box's journal.

    ``line`` is the 1-based anchor line in the file as it was before this probe (the block starts
    there in the patched file and spans ``block_lines`` lines); ``anchor`` is the regex or line
    number asked for, ``function`` the function it was restricted to. ``state`` is ``"active"``,
    or ``"pending"`` when an ``add_probe`` was interrupted before it finished (``temp_path`` may
    then remain). ``created_at`` is seconds since the epoch.

    ``once_per``: the key expression (``None``: once per process); ``max_prints``: lines per
    process at most with a key; ``when``: the condition a call must meet to print (``None``:
    every call may); ``max_repr``: characters of one printed value at most. ``mode``,
    ``owner_uid``, ``owner_gid``: the original file's permission bits and owner, restored by a
    revert (``None`` in entries written by older versions). ``owner_note``: ``"owner could not be
    kept: ..."`` when the last write (the add, or the revert for the value ``revert_probe``
    returns) left the file with another owner.
    """

    tag: str
    path: str
    line: int
    anchor: Union[str, int]
    function: Optional[str]
    exprs: tuple[str, ...]
    original_sha256: str
    patched_sha256: str
    backup_path: str
    journal_path: str
    block_lines: int
    created_at: float
    state: str = "active"
    temp_path: Optional[str] = None
    once_per: Optional[str] = None
    max_prints: int = MAX_PRINTS
    mode: Optional[int] = None
    owner_uid: Optional[int] = None
    owner_gid: Optional[int] = None
    owner_note: Optional[str] = None
    when: Optional[str] = None
    max_repr: int = MAX_REPR
    bytecode: tuple = ()
    bytecode_note: Optional[str] = None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["exprs"] = list(self.exprs)
        d["bytecode"] = [dict(b) for b in self.bytecode]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Probe":
        """A ``Probe`` from its journal JSON; keys it does not know are ignored, the ones added
        later (``once_per``, ``max_prints``, ``mode``, owner, ``when``, ``max_repr``) default.
        Raises ``ValueError`` (with the reason) when a field is missing or of the wrong type."""
        if not isinstance(d, dict):
            raise ValueError(f"not a JSON object but {type(d).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        required = [n for n, f in fields.items()
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in d]
        if missing:
            raise ValueError(f"missing field(s) {', '.join(missing)}")
        data = {k: v for k, v in d.items() if k in fields}
        for name, kinds in _FIELD_TYPES.items():
            if name in data and not (isinstance(data[name], kinds) and not isinstance(data[name], bool)):
                raise ValueError(f"field {name!r} is {data[name]!r}, not {'/'.join(k.__name__ for k in kinds)}")
        if not all(isinstance(e, str) for e in data["exprs"]):
            raise ValueError("field 'exprs' holds something other than text")
        if data.get("state", "active") not in ("active", "pending"):
            raise ValueError(f"field 'state' is {data['state']!r}, not 'active' or 'pending'")
        for name in ("max_prints", "max_repr"):
            if data.get(name, 1) < 1:
                raise ValueError(f"field {name!r} is {data[name]!r}, not a positive number")
        data["exprs"] = tuple(data["exprs"])
        if "bytecode" in data:
            if not all(isinstance(b, dict) and isinstance(b.get("cache"), str) and isinstance(b.get("backup"), str)
                       and isinstance(b.get("sha256"), str) for b in data["bytecode"]):
                raise ValueError("field 'bytecode' holds an entry without cache / backup / sha256")
            data["bytecode"] = tuple(dict(b) for b in data["bytecode"])
        return cls(**data)


_NONE = type(None)
#: The journal's field types checked by ``Probe.from_dict`` (bools are refused where ints go).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "tag": (str,), "path": (str,), "line": (int,), "anchor": (str, int), "function": (str, _NONE),
    "exprs": (list, tuple), "original_sha256": (str,), "patched_sha256": (str,), "backup_path": (str,),
    "journal_path": (str,), "block_lines": (int,), "created_at": (int, float), "state": (str,),
    "temp_path": (str, _NONE), "once_per": (str, _NONE), "max_prints": (int,), "mode": (int, _NONE),
    "owner_uid": (int, _NONE), "owner_gid": (int, _NONE), "owner_note": (str, _NONE), "when": (str, _NONE),
    "max_repr": (int,), "bytecode": (list, tuple), "bytecode_note": (str, _NONE),
}
