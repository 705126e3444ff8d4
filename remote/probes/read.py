"""Reading back what probes printed: the ``[probe:TAG pgid=G pid=P] ...`` lines of a log, split
into values (:func:`read_probe_output` over text, :func:`read_probe_log` with a grep on the box),
:class:`ProbeReading`, :func:`readings_by_launch`, :func:`launch_pgid`, :func:`parse_shape` and
:func:`parse_probe_value`.

Imports only the standard library, ``remote.box``, ``remote.errors`` and
:mod:`remote.probes.record`.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Union

from ..box import Box, PathLike
from ..errors import ProbeError, RemoteIsADirectory
from .record import TAG_RE, Probe


# -- reading what probes printed ---------------------------------------------------------------


def _line_rx(tag: str) -> "re.Pattern[str]":
    """A probe's output line: ``[probe:TAG pgid=G pid=P rank=R] `` (`` rank=R`` only where the
    printing process knew its rank; ``[probe:TAG] ``, printed by the
    probe blocks of earlier versions) not preceded by a quote (a traceback that quotes the probe's
    own source, ``print('[probe:TAG' + ...)``, is not output)."""
    return re.compile(r"(?<!['\"])\[probe:" + re.escape(tag)
                      + r"(?: pgid=(?P<pgid>\d+|\?))?(?: pid=(?P<pid>\d+|\?))?(?: rank=(?P<rank>\d+))?\] (?P<body>.*)$")


def launch_pgid(launch: Any) -> Optional[int]:
    """The process group that identifies a launch: ``launch`` itself when it is an int, its
    ``.pgid`` for a ``ServerHandle`` (``Box.launch_server``), a ``ServerProcess``
    (``Box.find_servers``) or anything else with one; ``None`` for ``None``. Raises ``TypeError``
    for anything else (a bool, a string, a handle without ``pgid``)."""
    if launch is None:
        return None
    value = launch if isinstance(launch, int) else getattr(launch, "pgid", None)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a launch is a process group id (int) or a server handle with .pgid, got {launch!r}")
    return value


def _parse_probe_line(line: str, tag: str, exprs: Optional[Sequence[str]]
                      ) -> Optional[tuple[Optional[int], Optional[int], dict[str, str], Optional[int]]]:
    """``(pgid, pid, {expr: text}, rank)`` of one log line printed by probe ``tag``, ``None`` when
    the line is not one. ``pgid``/``pid`` are ``None`` on a line of an older probe block (no pgid)
    or one printed where they could not be read (``?``); ``rank`` is ``None`` on a line without
    `` rank=R`` (a process that did not know its rank, or an older probe block)."""
    m = _line_rx(tag).search(line.rstrip("\r\n"))
    if not m:
        return None
    body = m.group("body")
    if body.startswith("<probe failed:"):
        raw = {"probe_error": body}
    elif exprs:
        raw = _split_known(body, list(exprs))
    else:
        raw = _split_heuristic(body)
    pgid, pid = (int(v) if v and v.isdigit() else None for v in (m.group("pgid"), m.group("pid")))
    return pgid, pid, raw, int(m.group("rank")) if m.group("rank") else None


def read_probe_output(
    log: Union[str, Iterable[str]], tag: Union[str, Probe], *, exprs: Optional[Sequence[str]] = None,
    pgid: Any = None,
) -> list[dict[str, str]]:
    """The values each ``[probe:TAG ...]`` line printed, one dict ``{expr: repr-text}`` per line,
    in log order. ``log`` is the log text or its lines.

    With ``exprs`` (or a ``Probe`` for ``tag``) the fields are split exactly on the known
    expressions; without, on spaces outside brackets and quotes before ``name=``. A line
    printed by a failing probe gives ``{"probe_error": text}``.

    ``pgid``: only the lines printed by that launch (an int, or a server handle / process with
    ``.pgid``: see :func:`launch_pgid`); a line without a pgid (printed by an older probe block)
    belongs to no known launch and is then left out. Default: every line. Raises ``TypeError``
    for a ``pgid`` that is no launch.
    """
    if isinstance(tag, Probe):
        exprs = exprs or tag.exprs
        tag = tag.tag
    want = launch_pgid(pgid)
    lines = log.splitlines() if isinstance(log, str) else log
    out = []
    for line in lines:
        parsed = _parse_probe_line(line, tag, exprs)
        if parsed is not None and (want is None or parsed[0] == want):
            out.append(parsed[2])
    return out


_OPEN = {"(": ")", "[": "]", "{": "}"}


def _balanced(text: str) -> bool:
    """True when brackets and quotes in ``text`` (a repr) are closed."""
    depth = 0
    quote: Optional[str] = None
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in ")]}":
            depth -= 1
    return depth == 0 and quote is None


def _split_known(body: str, exprs: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    pos = 0
    for i, expr in enumerate(exprs):
        key = expr + "="
        if not body.startswith(key, pos):
            values[expr] = ""
            continue
        start = pos + len(key)
        if i + 1 == len(exprs):
            values[expr] = body[start:]
            break
        marker = " " + exprs[i + 1] + "="
        cut = body.find(marker, start)
        first = cut
        while cut >= 0 and not _balanced(body[start:cut]):
            cut = body.find(marker, cut + 1)
        if cut < 0:
            cut = first
        if cut < 0:
            values[expr] = body[start:]
            pos = len(body)
        else:
            values[expr] = body[start:cut]
            pos = cut + 1
    return values


def _key_end(token: str) -> int:
    """Index of the ``=`` ending an expression at the start of ``token`` (-1 if none)."""
    depth = 0
    quote: Optional[str] = None
    for i, ch in enumerate(token):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "=" and depth == 0 and i > 0:
            nxt = token[i + 1 : i + 2]
            if nxt != "=" and token[i - 1] not in "=!<>":
                return i
    return -1


def _split_heuristic(body: str) -> dict[str, str]:
    tokens: list[str] = []
    current = ""
    for ch in body:
        if ch == " " and _balanced(current):
            tokens.append(current)
            current = ""
        else:
            current += ch
    tokens.append(current)
    values: dict[str, str] = {}
    key: Optional[str] = None
    for token in tokens:
        end = _key_end(token)
        if end > 0 and token[0] not in "<'\"":
            key = token[:end]
            values[key] = token[end + 1 :]
        elif key is not None:
            values[key] += " " + token
    return values


def parse_shape(text: str) -> tuple[int, ...]:
    """``"torch.Size([1, 384])"``, ``"(1, 384)"``, ``"[1, 384]"``, ``"(384,)"`` -> ``(1, 384)`` etc.

    Raises ``ValueError`` when the text is not a shape.
    """
    m = re.fullmatch(r"\s*(?:torch\.)?(?:Size\(\s*\[(?P<a>[^\]]*)\]\s*\)|\((?P<b>[^)]*)\)|\[(?P<c>[^\]]*)\])\s*", text)
    if not m:
        raise ValueError(f"not a shape: {text!r}")
    inner = next(g for g in (m.group("a"), m.group("b"), m.group("c")) if g is not None)
    parts = [s.strip() for s in inner.split(",")]
    if parts and parts[-1] == "":
        parts.pop()
    if not all(re.fullmatch(r"\d+", s) for s in parts):
        raise ValueError(f"not a shape: {text!r}")
    return tuple(int(s) for s in parts)


# -- parsed read-back from a log on the box ---------------------------------------------------

_NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
_SIZE_RE = re.compile(r"\s*(?:torch\.)?Size\(")


def parse_probe_value(text: str) -> Any:
    """One printed value (a ``repr``) as a Python value where that is safe and unambiguous.

    * a shape, ``torch.Size([1, 5, 480])`` or ``(1, 480)``, -> a tuple of ints;
    * ints, floats (``nan``/``inf`` too), bools, ``None``, strings, bytes, lists, tuples, dicts,
      sets -> the value (:func:`ast.literal_eval`, never ``eval``);
    * anything else (``torch.float32``, ``tensor([...])``, ``<error:...>``, a repr cut at
      ``MAX_REPR`` characters) -> the text unchanged.

    Raises ``TypeError`` when ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"a probe value is text, got {type(text).__name__}")
    s = text.strip()
    if _SIZE_RE.match(s):
        try:
            return parse_shape(s)
        except ValueError:
            return text
    if s in _NON_FINITE:
        return _NON_FINITE[s]
    if not s or s.startswith("<"):
        return text
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


@dataclass(frozen=True)
class ProbeReading:
    """One line a probe printed, read back from a log.

    ``values``: ``{expr: parsed value}`` (:func:`parse_probe_value`); ``raw``: ``{expr: the
    printed text}``; a line printed by a failing probe has the single key ``probe_error``.
    ``line_number``: 1-based line in the log; ``log_line``: the whole line as logged (rank tags
    and any prefix included). ``pgid``: the process group of the process that printed it (the
    launch: ``Box.launch_server`` makes the server its own group and SGLang's scheduler / TP
    worker processes inherit it); ``pid``: that process. Both ``None`` on a line printed by an
    older probe block (no ``pgid=`` in it: of unknown launch) or where they could not be read.
    ``rank``: the rank of that process as it printed it (``rank=R``: ``torch.distributed``'s
    rank, else the ``TP<r>`` of its process title, see ``remote.probes.text.RANK_LINES``);
    ``None`` when the line carries none.
    """

    tag: str
    values: dict
    raw: dict
    line_number: int
    log_line: str = ""
    pgid: Optional[int] = None
    pid: Optional[int] = None
    rank: Optional[int] = None

    @property
    def error(self) -> Optional[str]:
        """The failure text when the probe itself failed (``<probe failed:...>``), else ``None``."""
        return self.raw.get("probe_error")

    @property
    def errors(self) -> dict:
        """``{expr: text}`` of the expressions that raised (printed as ``<error:...>``)."""
        return {k: v for k, v in self.raw.items() if k != "probe_error" and v.startswith("<error:")}

    def to_dict(self) -> dict:
        """JSON-ready: tuples become lists; values JSON cannot hold (sets, bytes, nan) as text."""
        return {"tag": self.tag, "line_number": self.line_number, "pgid": self.pgid, "pid": self.pid,
                "rank": self.rank, "values": {k: _jsonable(v) for k, v in self.values.items()}, "raw": dict(self.raw),
                "log_line": self.log_line}


def readings_by_launch(readings: Iterable[ProbeReading]) -> dict[Optional[int], list[ProbeReading]]:
    """``{pgid: readings}`` in order of first appearance; key ``None`` holds the lines of unknown
    launch (printed by an older probe block, without ``pgid=``)."""
    out: dict[Optional[int], list[ProbeReading]] = {}
    for r in readings:
        out.setdefault(r.pgid, []).append(r)
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # JSON has no nan / inf
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def read_probe_log(
    box: Box,
    log_path: PathLike,
    tag: Union[str, Probe],
    *,
    exprs: Optional[Sequence[str]] = None,
    pgid: Any = None,
    timeout: float = 30,
) -> list[ProbeReading]:
    """What probe ``tag`` printed into the log file ``log_path`` on the box, one
    :class:`ProbeReading` per line, in log order (``[]`` when it has not fired).

    ``pgid``: only the lines printed by that launch: a process group id, or the launch's
    ``ServerHandle`` (``Box.launch_server``) / ``ServerProcess`` (``Box.find_servers``). A log
    appended to by several launches holds the same tag from each; only the lines of the launch
    you ask for are evidence about it. Lines without a pgid (printed by an older probe block) are
    of unknown launch and are then left out. Default ``None``: every line, each with its
    ``pgid`` (split them with :func:`readings_by_launch`).

    The log is never read whole: ``grep -n -a -F -e "[probe:TAG]" -e "[probe:TAG pgid=" LOG`` runs
    on the box and only the matching lines come back (a multi-GB log costs one sequential scan
    there). Fields are split on ``exprs`` (or the ``Probe``'s) when known, else heuristically (see
    :func:`read_probe_output`). ``timeout`` in seconds for the grep.

    Raises ``ProbeError`` for a malformed tag or when grep fails for another reason; ``TypeError``
    for a ``pgid`` that is no launch; ``RemoteFileNotFound`` when the log does not exist,
    ``RemoteIsADirectory`` when it is a directory, ``RemotePermissionError`` when it cannot be
    read; ``CommandTimedOut`` on time-out.
    """
    if isinstance(tag, Probe):
        exprs = exprs or tag.exprs
        tag = tag.tag
    if not isinstance(tag, str) or not TAG_RE.match(tag):
        raise ProbeError(f"probe tag {tag!r} must match {TAG_RE.pattern}")
    want = launch_pgid(pgid)
    path = box.expand_path(log_path)
    res = box.run(["grep", "-n", "-a", "-F", "-e", f"[probe:{tag}]", "-e", f"[probe:{tag} pgid=", "--", path],
                  timeout=timeout, check=False)
    if res.exit_code == 1:
        return []
    if res.exit_code != 0:
        st = box.stat(path, timeout=timeout)  # RemoteFileNotFound / RemotePermissionError, typed
        if st.is_dir:
            raise RemoteIsADirectory(f"the log {path} is a directory", path=path, box=box.name)
        raise ProbeError(f"grep over the log failed (exit {res.exit_code}): {res.stderr.strip()[-300:]}",
                         path=path, box=box.name)
    readings: list[ProbeReading] = []
    for row in res.stdout.splitlines():
        number, sep, line = row.partition(":")
        if not sep or not number.isdigit():
            continue
        parsed = _parse_probe_line(line, tag, exprs)
        if parsed is None:
            continue  # "[probe:TAG]" quoted, or not followed by the values
        line_pgid, line_pid, raw, line_rank = parsed
        if want is not None and line_pgid != want:
            continue
        values = dict(raw) if "probe_error" in raw else {k: parse_probe_value(v) for k, v in raw.items()}
        readings.append(ProbeReading(tag, values, raw, int(number), line.rstrip("\r"), line_pgid, line_pid,
                                     line_rank))
    return readings
