"""The probe journal on the box: JSON entries and the backups of the originals under
``STATE_DIR/probes/`` (:func:`journal_dir`), saved, loaded and listed (:func:`list_journal`,
:func:`list_probes`, :class:`JournalProblem` for an entry that cannot be read), dropped
(``_forget``), and what a journalled probe's file is now (:func:`probe_file_status`).

Imports only the standard library, ``remote.box``, ``remote.errors`` and
:mod:`remote.probes.record`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Optional, Sequence

from ..box import Box
from ..errors import ProbeError, RemoteFileDecodeError, RemoteFileError, RemoteFileNotFound
from .record import Probe

log = logging.getLogger("remote.probes")  # the package's logger, as before the split into modules


@dataclass(frozen=True)
class JournalProblem:
    """A journal entry that could not be read: ``tag`` (from its file name), ``journal_path``,
    ``backup_path`` (where that probe's original would be kept; it may not exist), ``reason``."""

    tag: str
    journal_path: str
    backup_path: str
    reason: str

    def describe(self) -> str:
        """One line: what is wrong and what to do about it."""
        return (f"journal entry {self.journal_path} is unreadable ({self.reason}); check the file that probe "
                f"{self.tag!r} patched by hand (its original may be at {self.backup_path}), then delete the entry")


# -- the journal -------------------------------------------------------------------------------


def journal_dir(box: Box) -> str:
    """Directory on the box holding the probe journal and backups."""
    return f"{box.state_dir}/probes"


def _journal_path(box: Box, tag: str) -> str:
    return f"{journal_dir(box)}/{tag}.json"


def _backup_path(box: Box, tag: str) -> str:
    return f"{journal_dir(box)}/{tag}.orig"


def _save(box: Box, probe: Probe) -> None:
    box.write_file(probe.journal_path, json.dumps(probe.to_dict(), indent=2) + "\n", mode=0o600, make_dirs=True)


def _parse_entry(text: str, tag: str) -> Probe:
    """The ``Probe`` in journal entry ``TAG.json``. Raises ``ValueError`` saying why it is unreadable."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    probe = Probe.from_dict(data)
    if probe.tag != tag:
        raise ValueError(f"it records tag {probe.tag!r} under the name {tag}.json")
    return probe


def _load(box: Box, tag: str, *, timeout: float = 30) -> Optional[Probe]:
    path = _journal_path(box, tag)
    try:
        text = box.read_text(path, timeout=timeout)
    except RemoteFileNotFound:
        return None
    except RemoteFileDecodeError as exc:
        raise ProbeError(f"probe journal entry is unreadable ({exc})", path=path, box=box.name) from None
    try:
        return _parse_entry(text, tag)
    except ValueError as exc:
        raise ProbeError(f"probe journal entry is unreadable ({exc})", path=path, box=box.name) from None


def list_journal(box: Box, *, timeout: float = 30) -> tuple[list[Probe], list[JournalProblem]]:
    """``(probes, problems)``: the probes recorded on the box (active and pending), oldest first,
    and a :class:`JournalProblem` for each entry that could not be read (not JSON, a field missing
    or of the wrong type, a tag that does not match its file name, not UTF-8, not readable), by
    tag. ``timeout``: seconds for each box call. Other box errors (a lost connection, a time-out)
    propagate; a missing journal directory is an empty journal."""
    try:
        names = box.listdir(journal_dir(box), timeout=timeout)
    except RemoteFileNotFound:
        return [], []
    probes: list[Probe] = []
    problems: list[JournalProblem] = []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        tag = name[: -len(".json")]
        path = _journal_path(box, tag)
        try:
            probes.append(_parse_entry(box.read_text(path, timeout=timeout), tag))
        except RemoteFileNotFound:
            continue  # reverted meanwhile
        except ValueError as exc:
            problems.append(JournalProblem(tag, path, _backup_path(box, tag), str(exc)))
        except RemoteFileError as exc:  # not UTF-8, not readable, a directory
            problems.append(JournalProblem(tag, path, _backup_path(box, tag), f"{type(exc).__name__}: {exc}"))
    probes.sort(key=lambda p: (p.created_at, p.tag))
    return probes, problems


def list_probes(box: Box, *, timeout: float = 30) -> list[Probe]:
    """Probes recorded on the box (active and pending), oldest first. ``timeout``: seconds for
    each box call. An unreadable journal entry is skipped (and logged as a warning):
    :func:`list_journal` returns those too."""
    probes, problems = list_journal(box, timeout=timeout)
    for problem in problems:
        log.warning("[%s] probe %s", box.name, problem.describe())
    return probes


def _forget(box: Box, probe: Probe) -> None:
    """Drop a probe's backup, then its journal entry (in that order: an interrupted forget leaves
    an entry whose file already matches the original, which the next revert just drops)."""
    box.remove(probe.backup_path, missing_ok=True)
    for b in probe.bytecode:
        box.remove(b["backup"], missing_ok=True)
    box.remove(probe.journal_path, missing_ok=True)


def _bytecode_backup_path(box: Box, tag: str, n: int) -> str:
    return f"{journal_dir(box)}/{tag}.pyc-{n}"


#: What :func:`probe_file_status` can say about a probed file.
FILE_STATUSES = {
    "patched": "patched as recorded",
    "stacked": "patched, with newer probes on top",
    "original": "back to the original",
    "edited": "edited by someone else",
    "missing": "missing",
}


def probe_file_status(
    box: Box, probe: Probe, *, others: Optional[Sequence[Probe]] = None, timeout: float = 60
) -> tuple[str, Optional[str]]:
    """``(status, sha256 now)`` of the file ``probe`` patched, judged from its sha256 against the
    journal: ``"patched"`` (the probe's patched text), ``"stacked"`` (the patched text of a newer
    probe on the same file that was added on top of this one, directly or through others),
    ``"original"`` (the bytes before the probe), ``"edited"`` (anything else: someone changed
    it), ``"missing"`` (sha256 ``None``). ``others``: the journal's probes (read when not given).
    Box errors other than a missing file propagate.
    """
    try:
        current = box.sha256(probe.path, timeout=timeout)
    except RemoteFileNotFound:
        return "missing", None
    if current == probe.patched_sha256:
        return "patched", current
    if current == probe.original_sha256:
        return "original", current
    others = list_probes(box, timeout=timeout) if others is None else list(others)
    top = probe.patched_sha256
    chain = True
    while chain:
        chain = False
        for q in others:
            if q.tag != probe.tag and q.path == probe.path and q.original_sha256 == top and q.patched_sha256 != top:
                top = q.patched_sha256
                if current == top:
                    return "stacked", current
                chain = True
                break
    return "edited", current
