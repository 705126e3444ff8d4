"""Taking a probe out: :func:`revert_probe` restores the original byte for byte from the journal's
backup (sha256 checked, mode and owner as recorded, bytecode caches put back), and
:func:`revert_all` reverts the whole journal, newest first.

Imports the standard library, ``remote.box``, ``remote.errors`` and the modules of
``remote.probes`` below it (record, journal, files); never place or read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shlex
from typing import Union

from ..box import Box
from ..errors import ProbeConflict, ProbeError, ProbeNotFound, RemoteFileNotFound
from .files import _keep_owner, _restore_bytecode
from .journal import _forget, _load, journal_dir, list_journal, list_probes
from .record import Probe


def revert_probe(box: Box, probe: Union[Probe, str], *, timeout: float = 60) -> Probe:
    """Remove a probe: restore the backed-up original byte for byte and drop the journal entry.

    ``probe`` is a ``Probe`` or its tag; the journal on the box is authoritative. A pending
    entry (an interrupted ``add_probe``) is cleaned up: its temporary file removed and the
    original restored if the replace had happened. The restored file replaces the patched one by
    an atomic rename (a new inode) with the recorded permission bits and owner; when the owner
    cannot be set (not root, not the owner) the file is still restored and the returned probe's
    ``owner_note`` says ``"owner could not be kept: ..."`` (else it is ``None``). Returns the probe
    as it was recorded, with that ``owner_note``. ``timeout``: seconds for each box call.

    Raises ``ProbeNotFound`` when the tag is not in the journal (``ProbeError`` when its entry is
    unreadable); ``ProbeConflict`` (backup kept) when the file is neither the patched text nor the
    original (the message says how to put the original back by hand: ``cp BACKUP PATH``, then
    ``workbench probe revert --tag TAG`` drops the record), when a newer probe on the same file
    must be reverted first, or when the restored file's sha256 does not match the original.
    """
    tag = probe.tag if isinstance(probe, Probe) else probe
    entry = _load(box, tag, timeout=timeout)
    if entry is None:
        raise ProbeNotFound(f"no probe {tag!r} in the journal at {journal_dir(box)}", box=box.name)
    if entry.temp_path:
        box.remove(entry.temp_path, missing_ok=True)
    try:
        now = box.realpath(entry.path, timeout=timeout)
    except RemoteFileNotFound:
        now = entry.path
    if now != entry.path:  # a component became a symlink since the add: never write through it
        raise ProbeConflict(
            f"probe {tag!r}: {entry.path} (the resolved file the probe patched) now resolves to {now}; not "
            f"writing through the link; the original is kept at {entry.backup_path}",
            path=entry.path, backup_path=entry.backup_path, box=box.name)
    try:
        current = box.sha256(entry.path, timeout=timeout)
    except RemoteFileNotFound:
        raise ProbeConflict(
            f"probe {tag!r}: the probed file no longer exists; backup kept at {entry.backup_path}",
            path=entry.path,
            backup_path=entry.backup_path,
            box=box.name,
        ) from None
    if current == entry.original_sha256:  # never replaced (interrupted add) or already restored
        _restore_bytecode(box, entry, timeout=timeout)
        _forget(box, entry)
        return dataclasses.replace(entry, owner_note=None)
    if current != entry.patched_sha256:
        newer = [
            q.tag
            for q in list_probes(box, timeout=timeout)
            if q.tag != tag and q.path == entry.path and q.original_sha256 == entry.patched_sha256
        ]
        if newer:
            msg = (
                f"probe {tag!r} has newer probes {newer} on top of it in the same file; "
                "revert those first (`workbench probe revert --all` does it in order, as does "
                "`workbench probe revert --file PATH`; revert_all in Python)"
            )
        else:
            msg = (
                f"probe {tag!r}: the file was edited by someone else since the probe was added "
                f"(sha256 now {current[:12]}…, patched {entry.patched_sha256[:12]}…); "
                f"not restoring over their changes; the original is kept at {entry.backup_path}; "
                f"to put it back anyway (their changes are lost): "
                f"`cp {shlex.quote(entry.backup_path)} {shlex.quote(entry.path)}`, then "
                f"`workbench probe revert --tag {tag}` drops the record"
            )
        raise ProbeConflict(msg, path=entry.path, backup_path=entry.backup_path, box=box.name)
    backup = box.read_bytes(entry.backup_path, timeout=timeout)
    if hashlib.sha256(backup).hexdigest() != entry.original_sha256:
        raise ProbeConflict(
            f"probe {tag!r}: the backup {entry.backup_path} does not match the original's sha256; not restoring",
            path=entry.path,
            backup_path=entry.backup_path,
            box=box.name,
        )
    mode = entry.mode if entry.mode is not None else box.stat(entry.path, timeout=timeout).mode
    tmp = box.temp_path_for(entry.path)
    box.transport.write_new(tmp, backup, mode=mode, timeout=timeout)
    try:
        note = _keep_owner(box, tmp, entry.owner_uid, entry.owner_gid, timeout=timeout)
        box.transport.rename(tmp, entry.path, timeout=timeout)
    except BaseException:
        box.remove(tmp, missing_ok=True)
        raise
    restored = box.sha256(entry.path, timeout=timeout)
    if restored != entry.original_sha256:
        raise ProbeConflict(
            f"probe {tag!r}: after restoring, the file's sha256 is {restored[:12]}…, expected "
            f"{entry.original_sha256[:12]}…; backup kept",
            path=entry.path,
            backup_path=entry.backup_path,
            box=box.name,
        )
    _restore_bytecode(box, entry, timeout=timeout)
    _forget(box, entry)
    return dataclasses.replace(entry, owner_note=note)


def revert_all(box: Box, *, timeout: float = 60) -> list[Probe]:
    """Revert every readable probe in the box's journal, newest first; return those reverted.

    Keeps going past a probe that cannot be reverted, and past journal entries that cannot be
    read (:func:`list_journal`), then raises ``ProbeConflict`` naming each failure and each
    unreadable entry; the exception carries ``.reverted`` (the probes reverted, gone from the
    journal) and ``.unreadable`` (the :class:`JournalProblem` list). ``timeout``: seconds for
    each box call.
    """
    probes, problems = list_journal(box, timeout=timeout)
    reverted: list[Probe] = []
    failures: list[str] = []
    for probe in reversed(probes):
        try:
            reverted.append(revert_probe(box, probe, timeout=timeout))
        except ProbeError as exc:
            failures.append(f"{probe.tag}: {exc.message}")
    failures += [problem.describe() for problem in problems]
    if failures:
        err = ProbeConflict(
            f"reverted {len(reverted)} probe(s); could not revert {len(failures)}:\n  " + "\n  ".join(failures),
            box=box.name,
        )
        err.reverted = reverted  # type: ignore[attr-defined]
        err.unreadable = problems  # type: ignore[attr-defined]
        raise err
    return reverted
