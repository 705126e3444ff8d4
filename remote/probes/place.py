"""Putting a probe into a file on the box: :func:`add_probe` (checked, backed up, journalled,
compiled, atomically renamed), :func:`resolve_probe_path` (the real file, inside the engine),
:func:`locate_anchor` (the line a probe would go before) and the crash hook for tests
(:data:`CRASH_ENV`).

Imports the standard library, ``remote.box``, ``remote.errors`` and the modules of
``remote.probes`` below it (record, whitelist, text, journal, files); never revert or read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import posixpath
import signal
import time
from typing import Optional, Sequence, Union

from ..box import Box, PathLike
from ..errors import ProbeCompileError, ProbeConflict, ProbeError, ProbeExists, ProbePathOutside
from .files import _COMPILE_SNIPPET, _describe_caches, _keep_owner, _parse_owner, bytecode_caches
from .journal import (
    _backup_path,
    _bytecode_backup_path,
    _forget,
    _journal_path,
    _load,
    _save,
    journal_dir,
    probe_file_status,
)
from .record import MAX_PRINTS, MAX_REPR, TAG_RE, Probe
from .text import _MARKER_RE, _find_anchor, _probe_block_lines, _split_lines, render_block
from .whitelist import check_expression

#: Environment variable naming a point at which ``add_probe`` SIGKILLs its own process (tests).
CRASH_ENV = "EAGLE_WORKBENCH_PROBE_CRASH_AT"
CRASH_POINTS = ("after-backup", "before-replace", "after-replace")


def _crash_point(name: str) -> None:
    """Test hook: SIGKILL this process when ``$EAGLE_WORKBENCH_PROBE_CRASH_AT`` names ``name``."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


# -- where a probe may write -------------------------------------------------------------------


def _inside(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root if root == "/" else root + "/")


def resolve_probe_path(box: Box, path: PathLike, root: Optional[PathLike] = None, *, timeout: float = 30) -> str:
    """The real file a probe on ``path`` patches: ``path`` with every symlink resolved on the box
    (``realpath``, each component). With ``root`` (the engine package directory) that file must
    lie inside the resolved ``root``: a symlink inside the package that leads out of it is refused.

    Returns the resolved absolute path. Raises :class:`ProbePathOutside` (``.link``: the first
    component of ``path``, as given, that is a symlink out of the root; ``.target``: where it
    resolves; ``.root``), and the box's file errors. ``timeout``: seconds for each box call
    (one ``realpath``, and one per component of ``path`` when it is refused)."""
    given = box.expand_path(path)
    real = box.realpath(given, timeout=timeout)
    if root is None:
        return real
    real_root = box.realpath(box.expand_path(root), timeout=timeout)
    if _inside(real, real_root):
        return real
    parts = [c for c in posixpath.normpath(given).split("/") if c]
    spelled, resolved = "", "/" if given.startswith("/") else ""
    for i, name in enumerate(parts):
        spelled = posixpath.join(spelled or ("/" if given.startswith("/") else ""), name)
        lexical = posixpath.join(resolved, name) if resolved else name
        target = box.realpath(spelled, timeout=timeout)
        if target != lexical and _inside(lexical, real_root) and not _inside(target, real_root):
            raise ProbePathOutside(
                f"{spelled} is a symlink to {target}, outside the engine package {real_root}; a probe only "
                "patches files inside the engine (remove the link or probe the file it points at explicitly)",
                link=spelled, target=target, root=real_root, path=given, box=box.name)
        resolved = target
    raise ProbePathOutside(f"{given} resolves to {real}, outside the engine package {real_root}; a probe only "
                           "patches files inside the engine",
                           target=real, root=real_root, path=given, box=box.name)


# -- add ---------------------------------------------------------------------------------------


def add_probe(
    box: Box,
    path: PathLike,
    *,
    before: Union[str, int],
    exprs: Sequence[str],
    tag: str,
    function: Optional[str] = None,
    once_per: Optional[str] = None,
    max_prints: int = MAX_PRINTS,
    when: Optional[str] = None,
    max_repr: int = MAX_REPR,
    python: Optional[str] = None,
    root: Optional[PathLike] = None,
    timeout: float = 60,
) -> Probe:
    """Insert a debug print before an anchor line of the Python file ``path`` on the box.

    ``before`` is a regex searched in each line (must match exactly one line, outside other
    probes' blocks, within ``function`` when given; ``function`` may be ``Class.method``) or a
    1-based line number. ``exprs`` are Python expressions evaluated at that point (they must only
    read: the whitelist of :func:`check_expression`); ``tag`` names the probe (letters,
    digits, ``_.-``). ``python`` is the box interpreter for the compile checks (default
    ``box.python``); ``timeout`` in seconds for each box call.

    Without ``once_per`` the probe prints once per process. With ``once_per`` (an expression, e.g.
    ``"hidden_states.shape[-1]"``) it prints the first time each distinct ``repr(once_per)`` is
    seen in the process, at most ``max_prints`` (a positive int, default 8) lines per process;
    a key that raises prints ``<probe failed:...>`` once and never raises into the engine (see
    :func:`render_block`). With ``when`` (an expression, e.g. ``"param_name not in params_dict"``)
    only a call where it is true prints (and counts towards once / ``max_prints``); it is checked
    by the same guard as the expressions and evaluated inside the probe's ``try``: a condition that
    raises prints ``<probe failed:...>`` once per process and never raises into the engine.
    ``max_repr``: characters of one printed value at most (default :data:`MAX_REPR`). All are
    journalled. Each line says which process printed it: ``[probe:TAG pgid=G pid=P]``.

    Only a file whose (resolved) name ends in ``.py`` is probed, and only when the original
    compiles with ``python`` on the box. The patched file replaces the original by an atomic
    rename: it keeps the original's permission bits and, when the box user may set it (root, or
    the owner setting a group it is in), its owner ``uid:gid`` (recorded in the journal);
    otherwise the probe is still added and ``Probe.owner_note`` says ``"owner could not be kept:
    ..."``. The file gets a new inode (a hard link to it keeps the old text).

    Adding the same tag again with the same file, anchor, expressions and ``once_per`` (and
    ``max_prints`` when ``once_per`` is given) returns the existing probe without touching the
    file (also when newer probes were added on top of it). A symlinked ``path`` is resolved: the
    real file is patched (``Probe.path``) and the link stays a link. With ``root`` (the engine
    package directory on the box) the resolved file must lie inside the resolved root
    (:func:`resolve_probe_path`): a symlink in the package pointing out of it raises
    ``ProbePathOutside`` naming the link and its target, before anything is read or written.

    Raises ``AnchorNotFound`` / ``AnchorAmbiguous``; ``ProbeCompileError`` when the original or
    the patched file does not compile on the box (nothing is written); ``ProbeConflict`` when the
    file changed while patching (nothing is written) or an earlier add of this tag was interrupted;
    ``ProbeExists`` when the tag is used by a different probe; ``ProbeError`` for a bad tag, an
    expression (or ``once_per``, ``when``) that is not Python or would change state, a bad
    ``max_prints`` or ``max_repr``, a file that is not ``.py`` or not UTF-8.
    """
    if not isinstance(tag, str) or not TAG_RE.match(tag):
        raise ProbeError(f"probe tag {tag!r} must match {TAG_RE.pattern}")
    exprs = tuple(exprs)
    if not exprs:
        raise ProbeError(f"probe {tag!r} needs at least one expression")
    for expr in exprs:
        check_expression(expr, what=f"probe {tag!r}: expression")
    if once_per is not None:
        check_expression(once_per, what=f"probe {tag!r}: once_per")
    if when is not None:
        check_expression(when, what=f"probe {tag!r}: when")
    for name, value in (("max_prints", max_prints), ("max_repr", max_repr)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProbeError(f"probe {tag!r}: {name} must be a positive int, got {value!r}")
    p = resolve_probe_path(box, path, root, timeout=timeout)  # patch the real file, never replace a symlink
    if not p.endswith(".py"):
        raise ProbeError("not a Python source file (a probe goes only into a file ending in .py)", path=p,
                         box=box.name)
    python = python or box.python

    existing = _load(box, tag, timeout=timeout)
    if existing is not None:
        same = (existing.path == p and existing.exprs == exprs and existing.anchor == before
                and existing.function == function and existing.once_per == once_per
                and (once_per is None or existing.max_prints == max_prints)
                and existing.when == when and existing.max_repr == max_repr)
        if not same:
            key = (f", once per {existing.once_per} (max {existing.max_prints})" if existing.once_per is not None
                   else ", once per process")
            if existing.when is not None:
                key += f", when {existing.when}"
            raise ProbeExists(
                f"probe tag {tag!r} is already used by a probe on {existing.path} line {existing.line} "
                f"with {list(existing.exprs)}{key}; revert it first (`workbench probe revert --tag {tag}`) "
                "or choose another tag",
                path=p,
                box=box.name,
            )
        if existing.state != "active":
            raise ProbeConflict(
                f"an earlier add of probe {tag!r} was interrupted (journal state {existing.state!r}); "
                f"run `workbench probe revert --tag {tag}` (revert_probe in Python) to clean up first",
                path=p,
                backup_path=existing.backup_path,
                box=box.name,
            )
        if probe_file_status(box, existing, timeout=timeout)[0] not in ("patched", "stacked"):
            raise ProbeConflict(
                f"probe {tag!r} is recorded but the file was edited since it was added", path=p,
                backup_path=existing.backup_path, box=box.name,
            )
        return existing

    original = box.read_bytes(p, timeout=timeout)
    mode = box.stat(p, timeout=timeout).mode
    original_sha = hashlib.sha256(original).hexdigest()
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProbeError(f"cannot probe a file that is not UTF-8 (byte {exc.start})", path=p, box=box.name) from None
    check = box.run([python, "-B", "-c", _COMPILE_SNIPPET, p, p], timeout=timeout, check=False)
    if not check.ok:
        raise ProbeCompileError(
            f"the original file does not compile with {python}; probe {tag!r} not added, nothing was written",
            output=(check.stderr or check.stdout),
            path=p,
            box=box.name,
            of_original=True,
        )
    owner = _parse_owner(check.stdout)
    caches = bytecode_caches(box, p, python=python, timeout=timeout)
    moved = tuple({"cache": c["cache"], "backup": _bytecode_backup_path(box, tag, n), "kind": c["kind"]}
                  for n, c in enumerate(c for c in caches if c["kind"] == "unchecked-hash"))
    lines = _split_lines(text)
    if any((m := _MARKER_RE.match(line)) and m.group(2) == tag for line in lines):
        raise ProbeError(
            f"the file already holds markers of probe {tag!r} that the journal at {journal_dir(box)} does not know",
            path=p,
            box=box.name,
        )
    idx = _find_anchor(text, lines, before, function, p, box)
    anchor_line = lines[idx]
    indent = anchor_line[: len(anchor_line) - len(anchor_line.lstrip(" \t"))]
    newline = "\r\n" if anchor_line.endswith("\r\n") else "\n"
    block = render_block(tag, exprs, indent, newline, max_repr, once_per=once_per, max_prints=max_prints, when=when)
    patched = ("".join(lines[:idx]) + block + "".join(lines[idx:])).encode("utf-8")
    probe = Probe(
        tag=tag,
        path=p,
        line=idx + 1,
        anchor=before,
        function=function,
        exprs=exprs,
        original_sha256=original_sha,
        patched_sha256=hashlib.sha256(patched).hexdigest(),
        backup_path=_backup_path(box, tag),
        journal_path=_journal_path(box, tag),
        block_lines=block.count("\n"),
        created_at=time.time(),
        state="pending",
        temp_path=box.temp_path_for(p),
        once_per=once_per,
        max_prints=max_prints,
        when=when,
        max_repr=max_repr,
        mode=mode,
        owner_uid=owner[0] if owner else None,
        owner_gid=owner[1] if owner else None,
        bytecode_note=_describe_caches(caches),
    )

    box.makedirs(journal_dir(box), mode=0o700, timeout=timeout)
    box.write_file(probe.backup_path, original, mode=0o600, timeout=timeout)
    if moved:
        backed = []
        for b in moved:
            data = box.read_bytes(b["cache"], timeout=timeout)
            box.write_file(b["backup"], data, mode=0o600, timeout=timeout)
            backed.append({**b, "sha256": hashlib.sha256(data).hexdigest()})
        probe = dataclasses.replace(probe, bytecode=tuple(backed))
    _save(box, probe)
    _crash_point("after-backup")
    try:
        box.transport.write_new(probe.temp_path, patched, mode=mode, timeout=timeout)
        check = box.run([python, "-B", "-c", _COMPILE_SNIPPET, probe.temp_path, p], timeout=timeout, check=False)
        if not check.ok:
            raise ProbeCompileError(
                f"probe {tag!r} before line {idx + 1} makes the file fail to compile with {python}",
                output=(check.stderr or check.stdout),
                path=p,
                box=box.name,
            )
        if owner is None:
            note: Optional[str] = ("owner could not be kept: the original's owner could not be read "
                                   f"({check.stdout.strip()[-200:]!r})")
        else:
            note = _keep_owner(box, probe.temp_path, *owner, current=_parse_owner(check.stdout), timeout=timeout)
        _crash_point("before-replace")
        current = box.sha256(p, timeout=timeout)
        if current != original_sha:
            raise ProbeConflict(
                f"the file changed while probe {tag!r} was being added (sha256 {original_sha[:12]}… -> "
                f"{current[:12]}…); nothing was written",
                path=p,
                box=box.name,
            )
        box.transport.rename(probe.temp_path, p, timeout=timeout)
    except BaseException:
        box.remove(probe.temp_path, missing_ok=True)
        _forget(box, probe)
        raise
    for b in probe.bytecode:  # the source is patched: an unchecked-hash cache would still run the original
        box.remove(b["cache"], missing_ok=True, timeout=timeout)
    _crash_point("after-replace")
    probe = dataclasses.replace(probe, state="active", temp_path=None, owner_note=note)
    _save(box, probe)
    return probe


def locate_anchor(
    box: Box,
    path: PathLike,
    *,
    before: Union[str, int],
    function: Optional[str] = None,
    without_probes: bool = False,
    timeout: float = 60,
) -> int:
    """The 1-based line of the file ``path`` on the box that a probe with this anchor would go
    before (the same rules as :func:`add_probe`: one match outside other probes' blocks, within
    ``function``, on the first line of a statement; an int ``before`` is a line of the file as it
    is now). Reads the file; changes nothing.

    With ``without_probes`` the line is counted as if the blocks of the probes already in the file
    were not there: the original file's numbering (the lines outside probe marker blocks).

    Raises ``AnchorNotFound`` / ``AnchorAmbiguous``; ``RemoteFileNotFound`` when the file is
    absent; ``ProbeError`` when it is not UTF-8.
    """
    p = box.realpath(path, timeout=timeout)
    raw = box.read_bytes(p, timeout=timeout)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProbeError(f"cannot probe a file that is not UTF-8 (byte {exc.start})", path=p, box=box.name) from None
    lines = _split_lines(text)
    idx = _find_anchor(text, lines, before, function, p, box)
    if without_probes:
        idx -= sum(1 for i in _probe_block_lines(lines) if i < idx)
    return idx + 1
