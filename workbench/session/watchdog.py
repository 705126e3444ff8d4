"""The run's watchdog on the box (issue 26): a run that changes a box leaves a small process there
that restores the box from the journal when the run's heartbeat goes silent.

The program is :mod:`workbench.session.watchdog_box` (standard library only; its text is sent to
the box's ``python3 -I -S -`` on stdin through ``box.run``, as the run lock's script is: nothing of
the workbench is installed on the box). This module is the driver's side:

- :func:`start_watchdog`: right after a run takes the box's run lock
  (:func:`workbench.session.box_session.open_box`), start the watchdog of that run, detached from
  the connection (it survives the SSH channel and sshd's session). It watches the lock file: the
  run's heartbeat (:class:`workbench.session.runlock.RunLock` touches it every
  :func:`heartbeat_interval` seconds over its own connection, wherever the driver runs) and, for a
  driver on the box's own kernel, its process. Silent for ``watchdog_after_s`` seconds (the runbook
  parameter, ``--watchdog-after`` of ``workbench runbook``; default :data:`WATCHDOG_AFTER_S`,
  :data:`OFF` disables it), it takes the lock over, restores the box as
  :func:`workbench.session.journal.restore_box` does, writes its report
  (``<state_dir>/diagnosis/watchdog-report.json``) and exits. It exits at once (within a poll,
  :data:`POLL_S`) when the run releases the lock. One watchdog per state dir (``flock``), acting
  only for its run's lock (checked under the lock script's own ``flock``): two runs never get two
  watchdogs acting on the same journal.
- :func:`read_report` / :func:`acknowledge_report` / :func:`report_lines` / :func:`report_notice`:
  what it did, for ``workbench restore``, ``workbench status`` and the pending-run notice.
- :func:`restore_on_box`: the watchdog's restore run now, from the driver (the parity test runs it
  beside ``restore_box`` on the same journal).

Units: seconds. Errors: :class:`~workbench.errors.WatchdogError`; the box's own errors are
``remote.errors.RemoteError``.
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from workbench.errors import DiagnosisError, WatchdogError
from workbench.session import watchdog_box
from workbench.session.watchdog_box import DIAGNOSIS_DIR, REPORT_NAME, SEEN_REPORT_NAME, WATCHDOG_RUNBOOK

__all__ = ["WATCHDOG_AFTER_S", "OFF", "MIN_WATCHDOG_AFTER_S", "MAX_WATCHDOG_AFTER_S", "POLL_S", "watchdog_after_ok",
           "WATCHDOG_AFTER_EXPECTED", "parse_report", "Watchdog", "start_watchdog",
           "check_watchdog_after", "heartbeat_interval", "poll_interval", "read_report", "acknowledge_report",
           "report_lines", "report_notice", "restore_on_box", "script_text", "WATCHDOG_RUNBOOK", "report_path"]

#: the default silence (seconds) after which the watchdog restores the box
WATCHDOG_AFTER_S = 300.0
#: ``watchdog_after_s = 0``: no watchdog
OFF = 0
#: the shortest silence a watchdog may wait for (the heartbeat beats 5 times within it)
MIN_WATCHDOG_AFTER_S = 1.0
#: the longest (the bound of every run time-out: ``workbench.session.box_session.MAX_RUN_SECONDS``)
MAX_WATCHDOG_AFTER_S = 1_000_000.0
#: the watchdog's poll interval at most (seconds): how soon it exits after the run's end
POLL_S = 1.0


@functools.lru_cache(maxsize=1)
def script_text() -> str:
    """The watchdog program's source (:mod:`workbench.session.watchdog_box`), as sent to the box."""
    return Path(watchdog_box.__file__).read_text(encoding="utf-8")


def watchdog_after_ok(value: Any) -> bool:
    """True when ``value`` is a watchdog silence: ``0`` (:data:`OFF`) or a number of seconds from
    :data:`MIN_WATCHDOG_AFTER_S` to :data:`MAX_WATCHDOG_AFTER_S` (a bool, text, inf or nan never is)."""
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            and (value == 0 or MIN_WATCHDOG_AFTER_S <= value <= MAX_WATCHDOG_AFTER_S))


#: what a watchdog silence must be, in the words of the errors
WATCHDOG_AFTER_EXPECTED = (f"0 (no watchdog) or a number of seconds from {MIN_WATCHDOG_AFTER_S:g} "
                           f"to {MAX_WATCHDOG_AFTER_S:.0f}")


def check_watchdog_after(value: Any, *, name: str = "watchdog_after_s") -> float:
    """``value`` as the watchdog's silence in seconds (:func:`watchdog_after_ok`). Raises
    :class:`~workbench.errors.DiagnosisError` naming ``name`` and the value for anything else."""
    if not watchdog_after_ok(value):
        raise DiagnosisError(f"bad parameters: {name} must be {WATCHDOG_AFTER_EXPECTED}, got {value!r}")
    return float(value)


def heartbeat_interval(after_s: float) -> float:
    """Seconds between two heartbeats of a run watched after ``after_s`` seconds of silence: five
    beats within it, at most ``runlock.HEARTBEAT_S`` apart."""
    from workbench.session.runlock import HEARTBEAT_S

    return max(0.05, min(HEARTBEAT_S, after_s / 5.0))


def poll_interval(after_s: float) -> float:
    """The watchdog's poll interval for ``after_s``: a tenth of it, at most :data:`POLL_S`."""
    return max(0.05, min(POLL_S, after_s / 10.0))


@dataclass
class Watchdog:
    """A watchdog started on a box: its ``pid`` there, the run it watches, its silence threshold
    and poll interval (seconds)."""

    pid: int
    run_id: str
    after_s: float
    poll_s: float
    box: str

    def describe(self) -> str:
        """``watchdog pid 123 on BOX (restores the box after 300 s of silence)``."""
        return f"watchdog pid {self.pid} on {self.box} (restores the box after {self.after_s:g} s of silence)"


def _run_box_script(box, op: str, config: dict, *, timeout: float) -> dict:
    argv = [box.python, "-I", "-S", "-", op, str(box.state_dir), json.dumps(config)]
    res = box.run(argv, stdin=script_text(), timeout=timeout, check=False)
    try:
        answer = json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise WatchdogError(f"the watchdog program on {box} printed no answer (exit {res.exit_code}): "
                            f"{(res.stderr or res.stdout).strip()[-300:]!r}") from exc
    if res.exit_code != 0 or not isinstance(answer, dict):
        raise WatchdogError(f"the watchdog program failed on {box} (exit {res.exit_code}): "
                            f"{(res.stderr or res.stdout).strip()[-300:]}")
    return answer


def start_watchdog(box, run_id: str, *, after_s: float = WATCHDOG_AFTER_S, poll_s: Optional[float] = None,
                   server_start_timeout: float = 600.0, wait_s: Optional[float] = None,
                   timeout: float = 30.0) -> Watchdog:
    """Start the watchdog of run ``run_id`` on ``box`` (the run holds the box's run lock) and
    return it once it watches. ``after_s``: seconds of silence before it restores the box;
    ``poll_s``: how often it looks (default :func:`poll_interval`); ``server_start_timeout``: how
    long its restore waits for the relaunched original server to get healthy; ``wait_s``: how
    long it waits for the previous watchdog of the box to exit (default ``max(5, 3 polls)``: one
    whose run ended exits within a poll); ``timeout``: seconds for the ``box.run`` that starts it.

    Raises :class:`WatchdogError`: ``status`` ``"busy"`` (another watchdog still watches this state
    dir), ``"not-held"`` (the run lock is not ``run_id``'s), ``"error"`` (it could not start; the
    message says why); ``remote.errors.RemoteError`` for the box."""
    after_s = check_watchdog_after(after_s)
    if after_s == OFF:
        raise WatchdogError("watchdog_after_s is 0: no watchdog to start", "bad-parameter")
    poll_s = poll_interval(after_s) if poll_s is None else float(poll_s)
    wait_s = max(5.0, 3 * poll_s) if wait_s is None else float(wait_s)
    config = {"run_id": run_id, "after_s": after_s, "poll_s": poll_s, "wait_s": wait_s,
              "server_start_timeout": float(server_start_timeout)}
    answer = _run_box_script(box, "start", config, timeout=max(timeout, wait_s + 15.0))
    status = answer.get("status")
    if status == "watching":
        return Watchdog(pid=int(answer["pid"]), run_id=run_id, after_s=after_s, poll_s=poll_s, box=box.name)
    if status == "busy":
        other = answer.get("watchdog") or {}
        raise WatchdogError(f"another watchdog (pid {other.get('pid')}, of run {other.get('run_id')}) still watches "
                            f"{box.state_dir} on {box.name} after {wait_s:g} s", "busy")
    if status == "not-held":
        raise WatchdogError(f"the run lock on {box.name} is not run {run_id}'s (holder: {answer.get('holder')}); "
                            "no watchdog started", "not-held")
    raise WatchdogError(f"the watchdog could not start on {box.name}: {answer.get('error') or answer}",
                        str(status or "error"))


def restore_on_box(box, *, server_start_timeout: float = 600.0, timeout: float = 60.0) -> dict:
    """Run the watchdog's restore (:func:`workbench.session.watchdog_box.restore`) on ``box`` now,
    taking and releasing no lock: ``{"actions", "problems", "clean", "run_id"}``. ``timeout``:
    seconds for the whole call (a relaunch waits up to ``server_start_timeout`` more). Raises
    :class:`WatchdogError` (no answer), ``RemoteError``."""
    return _run_box_script(box, "restore", {"server_start_timeout": float(server_start_timeout)},
                           timeout=timeout + server_start_timeout)


def report_path(box, *, seen: bool = False) -> str:
    """``<state_dir>/diagnosis/watchdog-report.json`` (``seen``: the one already shown)."""
    return f"{box.state_dir}/{DIAGNOSIS_DIR}/{SEEN_REPORT_NAME if seen else REPORT_NAME}"


def parse_report(text: Optional[str]) -> Optional[dict]:
    """The report in ``text`` (None for none; ``{"unreadable": why}`` for text that is no report)."""
    if text is None or not text.strip():
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return {"unreadable": f"not JSON ({exc})"}
    return data if isinstance(data, dict) else {"unreadable": "not a JSON object"}


def read_report(box, *, seen: bool = False, timeout: float = 10.0) -> Optional[dict]:
    """The watchdog's last report on ``box`` not yet shown (``seen``: the last one shown), or None.
    Raises ``RemoteError`` for the box."""
    from remote.errors import RemoteFileNotFound

    try:
        return parse_report(box.read_text(report_path(box, seen=seen), timeout=timeout))
    except RemoteFileNotFound:
        return None


def acknowledge_report(box, *, timeout: float = 10.0) -> None:
    """The report was shown: keep it as the seen one (the notice stops naming it). Raises
    ``RemoteError``."""
    box.run(["mv", "-f", "--", report_path(box), report_path(box, seen=True)], timeout=timeout, check=False)


def _when(stamp: Any) -> str:
    if not isinstance(stamp, (int, float)):
        return "at an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def report_notice(report: dict) -> str:
    """One line: ``the watchdog restored the box at T: run X was silent for 300 s (4 actions, no
    problem)``."""
    if "unreadable" in report:
        return f"the watchdog's report is unreadable ({report['unreadable']})"
    problems = report.get("problems") or []
    outcome = (f"{len(report.get('actions') or [])} actions, "
               + (f"{len(problems)} left undone" if problems else "everything undone"))
    return (f"the watchdog restored the box at {_when(report.get('acted_at'))}: run {report.get('run_id')} had been "
            f"silent for {float(report.get('silent_for_s') or 0):.0f} s ({outcome})")


def report_lines(report: dict) -> list[str]:
    """The report as lines: the notice, then each action, then ``FAILED:`` each problem."""
    lines = [report_notice(report)]
    lines += [f"  {a}" for a in report.get("actions") or []]
    lines += [f"  FAILED: {p}" for p in report.get("problems") or []]
    if isinstance(report.get("restored_after_silence_s"), (int, float)):
        lines.append(f"  restored {report['restored_after_silence_s']:.1f} s after the run's last sign of life "
                     f"(restore itself: {float(report.get('restore_s') or 0):.1f} s)")
    return lines
