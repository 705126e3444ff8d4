"""Every error the workbench raises, in one tree (the box layer's own are :mod:`remote.errors`).

::

    WorkbenchError                      base of everything below; .exit_code (2: the command could not run)
    ├── WorkbenchInputError (ValueError)    bad input, named with where it was wrong
    │   ├── LaunchCommandError              a launch command that cannot be parsed or rewritten (.position, .token)
    │   │   └── SpeculativeConfigError          vLLM's --speculative-config value is not a JSON object (.flag, .position)
    │   ├── RuleInputError                  a rule lacks what it needs (e.g. no draft path)
    │   ├── PromptSetError                  a prompt set that cannot be used (.path, .line)
    │   ├── SweepError                      a sweep grid or launch command the sweep cannot use
    │   ├── RunbookParameterError           runbook parameters of the wrong kind (.runbook, .problems)
    │   ├── LogInputError                   not an SGLang server log, or empty
    │   ├── FigureInputError                a figure input missing, mistyped or not finite
    │   ├── VerdictSchemaError              a verdict document missing a key or mistyped (.path, .problems)
    │   └── LedgerError                     an invalid verdict, a duplicate or unknown hypothesis id
    ├── CheckpointError                 a model directory on the box (.path)
    │   ├── ConfigUnreadable                config.json missing, unreadable or not a JSON object
    │   ├── CheckpointUnreadable            a safetensors file or index that cannot be used (.reason)
    │   └── TensorNotFound                  no tensor of that name
    ├── EngineNotFound (RuntimeError)   the engine package could not be located on the box (.where)
    ├── SourceLookupError (LookupError) a file, line or definition not in the engine's source (.where)
    ├── DoctorError (RuntimeError)      the doctor could not run: no running server (.where)
    ├── AcceptanceError (RuntimeError)  a /generate measurement could not be made
    ├── MeasureError (RuntimeError)     no source of a measurement answered
    ├── JournalError (RuntimeError)     the box's journal is unreadable or another run's is open
    │   └── WatchdogError                   the run's watchdog could not start on the box, or restored it (.status)
    ├── DraftCopyError (RuntimeError)   a repaired draft copy could not be made or proved (.path, .problems)
    ├── GpuError (RuntimeError)         the box's GPUs (read with nvidia-smi: workbench.session.gpus)
    │   ├── GpuQueryError (ValueError)      nvidia-smi printed a line that is not the CSV asked for (.query, .line, .lineno)
    │   └── GpusNotFreed                    a stopped server's GPUs not back at their baseline in time (.gpus, .holders)
    ├── DiagnosisError (RuntimeError)   a session or diagnosis step cannot run
    │   ├── LaunchRefused                   a launch the doctor says will not start, refused (.findings, .label)
    │   │   ├── GpusHeld                        the launch's GPUs hold memory of processes not this run's (.holders, .orphans)
    │   │   └── GpusTooFew                      the launch needs more GPUs than the box has (.needed, .available)
    │   └── ServerStoppedAnswering          the server under measurement died or hung mid-run (.server, .port, .pid, .state, .step)
    └── ReportError (RuntimeError)      a report could not be exported, or would not be self-contained
        ├── BrowserNotFound                 no Chromium binary on this machine
        └── BrowserError                    Chromium ran but failed or timed out (.stderr)

Each class also derives from the built-in exception it has always been (``ValueError``,
``RuntimeError``, ``LookupError``), so ``except ValueError`` around a parser still works. The
command line maps every :class:`WorkbenchError` to its ``exit_code`` in one place
(:mod:`workbench.cli`); a ``remote.errors.RemoteError`` (an unreachable box, a time-out) is exit 2
there too.
"""

from __future__ import annotations

from typing import Sequence

__all__ = [
    "WorkbenchError", "WorkbenchInputError", "LaunchCommandError", "SpeculativeConfigError", "RuleInputError", "PromptSetError", "SweepError",
    "RunbookParameterError", "LogInputError", "FigureInputError", "VerdictSchemaError", "LedgerError",
    "CheckpointError", "ConfigUnreadable",
    "CheckpointUnreadable", "TensorNotFound", "EngineNotFound", "ServerChoiceError", "SourceLookupError", "DoctorError",
    "AcceptanceError", "MeasureError", "JournalError", "WatchdogError", "DraftCopyError", "DiagnosisError", "LaunchRefused",
    "GpuError", "GpuQueryError", "GpusNotFreed", "GpusHeld", "GpusTooFew",
    "ServerStoppedAnswering", "ReportError",
    "BrowserNotFound", "BrowserError",
]


class WorkbenchError(Exception):
    """Base of every workbench error. ``exit_code``: what the ``workbench`` command exits with
    when this error ends it (2: the command itself could not run)."""

    exit_code: int = 2


class WorkbenchInputError(WorkbenchError, ValueError):
    """Bad input to the workbench; the message says what was wrong and where."""


class LaunchCommandError(WorkbenchInputError):
    """A launch command that cannot be parsed or rewritten.

    ``position`` is a 0-based character column in the text (quote errors) and ``token`` a
    0-based token index (flag errors), whichever applies; both are ``None`` otherwise.
    """

    def __init__(self, message: str, *, position: int | None = None, token: int | None = None):
        super().__init__(message)
        self.position = position
        self.token = token


class SpeculativeConfigError(LaunchCommandError):
    """vLLM's ``--speculative-config`` (``-sc``) value cannot be read: not JSON, or JSON that is not
    an object (vLLM 0.32.0 parses it with ``json.loads``, ``vllm/engine/arg_utils.py``, and its
    ``SpeculativeConfig(**dict)`` needs an object). ``flag``: the option as written;
    ``position``: the 0-based character in the value where ``json`` stopped (``None`` when the
    JSON parsed but is not an object); ``token``: the argument's token index when known."""

    def __init__(self, message: str, *, flag: str, position: int | None = None, token: int | None = None):
        super().__init__(message, position=position, token=token)
        self.flag = flag


class RuleInputError(WorkbenchInputError):
    """A rule cannot run: the launch command lacks what it needs (e.g. a draft path)."""


class PromptSetError(WorkbenchInputError):
    """A prompt set that cannot be used. ``path``: the file (or the name asked for); ``line``: the
    1-based line at fault, or ``None`` for the file as a whole. ``str()`` is ``path:line: message``."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path, self.line, self.message = path, line, message
        super().__init__(f"{path}:{line}: {message}" if line is not None else f"{path}: {message}")


class SweepError(WorkbenchInputError):
    """A grid or launch command the sweep cannot use; the message names the part that is wrong."""


class RunbookParameterError(WorkbenchInputError):
    """Runbook parameters that are not what the runbook takes, every one at once (checked before
    anything touches the box: :func:`workbench.runbook_params.check_runbook_parameters`).
    ``runbook``: its name; ``problems``: one phrase per bad parameter, each naming it, the value
    given and what it must be (``"port must be None ... or a TCP port number 1-65535, got 'abc'"``).
    ``str()`` is ``bad parameters for RUNBOOK: PROBLEM; PROBLEM ...`` (one line)."""

    def __init__(self, runbook: str, problems: Sequence[str]):
        self.runbook = runbook
        self.problems = list(problems)
        super().__init__(f"bad parameters for {runbook}: " + "; ".join(self.problems))


class LogInputError(WorkbenchInputError):
    """The input is not something a log can be read from: not an SGLang server log (no line carries
    SGLang's ``[YYYY-mm-dd HH:MM:SS]`` prefix and none is a batch line), or empty. The message
    names the file."""


class FigureInputError(WorkbenchInputError):
    """An input to a figure function is missing, of the wrong type, or not a finite number."""


class VerdictSchemaError(WorkbenchInputError):
    """The verdict document misses a required key or holds a value of the wrong type.

    Attributes:
        path: the first offending key path, e.g. ``"hypotheses[1].verdict"``.
        problems: every ``(path, message)`` found.
    """

    def __init__(self, problems: Sequence[tuple[str, str]]):
        self.problems = list(problems)
        self.path = self.problems[0][0] if self.problems else ""
        super().__init__("invalid verdict document: " + "; ".join(f"{p}: {m}" for p, m in self.problems))


class LedgerError(WorkbenchInputError):
    """An invalid verdict, a duplicate or unknown hypothesis id."""


class CheckpointError(WorkbenchError):
    """Something about a model directory on the box; ``.path`` names the file."""

    def __init__(self, message: str, *, path: str):
        self.path = path
        super().__init__(f"{message}: {path}")


class ConfigUnreadable(CheckpointError):
    """``config.json`` (or another JSON file) is missing, unreadable, or not a JSON object."""


class CheckpointUnreadable(CheckpointError):
    """A safetensors file or index cannot be used; ``.reason`` is the short reason
    (``truncated``, ``header-too-large``, ``not-json``, ``bad-entry``, ``unknown-dtype``,
    ``offsets-past-end``, ``size-mismatch``, ``missing``, ``bad-index``)."""

    def __init__(self, message: str, *, path: str, reason: str):
        self.reason = reason
        super().__init__(message, path=path)


class TensorNotFound(CheckpointError):
    """The checkpoint has no tensor of that name."""


class EngineNotFound(WorkbenchError, RuntimeError):
    """The engine package could not be located on the box. ``.where`` names the box and the
    interpreter tried; the message says what to pass instead (``--python``, ``--port``)."""

    def __init__(self, message: str, *, where: str = ""):
        self.where = where
        super().__init__(message + (f" ({where})" if where else ""))


class ServerChoiceError(EngineNotFound):
    """No single server can be chosen: several run and nothing picks one, or the port asked
    for has none. ``.ports`` are the ports of the servers running (``None`` for a server
    without ``--port``); the message lists each server (port, pid, program) and says how to
    pick one in the caller's own terms (``how``: ``"--port N"`` on the command line,
    ``"port = N in the parameters cell"`` in a notebook, ``"the port field"`` in a widget)."""

    def __init__(self, message: str, *, ports: Sequence[int | None] = (), where: str = ""):
        self.ports = list(ports)
        super().__init__(message, where=where)


class SourceLookupError(WorkbenchError, LookupError):
    """A file, line or definition asked for is not in the engine's source. ``.where`` names the
    file (or the engine root) searched."""

    def __init__(self, message: str, *, where: str = ""):
        self.where = where
        super().__init__(message + (f" ({where})" if where else ""))


class DoctorError(WorkbenchError, RuntimeError):
    """The doctor itself could not run (exit code 2): an unreachable box, no server running when
    one was asked for. ``.where`` names the box or input. (A command with no ``--model-path`` is a
    finding, ``model-path-missing``.)"""

    def __init__(self, message: str, *, where: str = ""):
        self.where = where
        super().__init__(f"{message}" + (f" ({where})" if where else ""))


class AcceptanceError(WorkbenchError, RuntimeError):
    """A measurement could not be made: the server was unreachable, answered with an error
    status, or sent a body that is not a ``/generate`` response. The message names the URL."""


class MeasureError(WorkbenchError, RuntimeError):
    """No measurement could be made: the server is unreachable, or no selected source answered.
    The message names the URL and what failed."""


class JournalError(WorkbenchError, RuntimeError):
    """The journal on the box is unreadable, or another run's journal is still open."""


class WatchdogError(JournalError):
    """The run's watchdog on the box (:mod:`workbench.session.watchdog`) could not be started, or
    it restored the box while this run still went on (its heartbeat was silent too long: the run
    lost the box and must change nothing more). ``status``: the watchdog's answer (``busy``,
    ``not-held``, ``error``, ``lost``)."""

    def __init__(self, message: str, status: str = "error"):
        super().__init__(message)
        self.status = status


class DraftCopyError(WorkbenchError, RuntimeError):
    """A repaired copy of the draft (:mod:`workbench.session.draft_copy`) could not be made or
    proved: the repair does not fit the draft (a tensor to rename that is not there, a name that
    collides, a value that does not fit its dtype, ...), the copy failed on the box, or it does not
    read back as planned. ``.path``: the draft (or the copy) concerned; ``.message``: what went
    wrong; ``.problems``: every problem found, one line each (validation reports them all at once).
    ``str()`` is ``path: message`` followed by the problems, one per line."""

    def __init__(self, message: str, *, path: str, problems: Sequence[str] = ()):
        self.message = message
        self.path = path
        self.problems = list(problems)
        super().__init__(f"{path}: {message}" + "".join(f"\n  - {p}" for p in self.problems))


class GpuError(WorkbenchError, RuntimeError):
    """The box's GPUs, read with ``nvidia-smi`` (:mod:`workbench.session.gpus`), are not as needed."""


class GpuQueryError(GpuError, ValueError):
    """``nvidia-smi`` printed a line that is not the CSV asked for. ``query``: which query
    (``--query-gpu`` / ``--query-compute-apps``); ``line``: the line as printed; ``lineno``: its
    1-based number in the output. The other lines are still read (one bad line hides nothing)."""

    def __init__(self, message: str, *, query: str = "", line: str = "", lineno: int | None = None):
        self.query, self.line, self.lineno = query, line, lineno
        where = f"nvidia-smi {query}" + (f" line {lineno}" if lineno is not None else "")
        super().__init__(f"{where}: {message}: {line!r}" if line or lineno is not None else f"{where}: {message}")


class GpusNotFreed(GpuError):
    """A server was stopped (its whole process tree is gone) but the GPUs it used did not get back
    to their baseline ``memory.used`` within the time-out (:mod:`workbench.session.gpu_release`).
    ``gpus``: one dict per GPU still above it (``index``, ``uuid``, ``used_mib``, ``baseline_mib``,
    ``basis``); ``holders``: the processes holding memory on those GPUs (dicts: ``pid``, ``title``,
    ``user``, ``mib`` per GPU index; empty in a container, where nvidia-smi lists no PIDs);
    ``waited_s``: seconds waited; ``server``: which server was stopped."""

    def __init__(self, message: str, *, gpus: Sequence[dict] = (), holders: Sequence[dict] = (),
                 waited_s: float = 0.0, server: str = ""):
        self.gpus, self.holders = list(gpus), list(holders)
        self.waited_s, self.server = waited_s, server
        super().__init__(message)


class DiagnosisError(WorkbenchError, RuntimeError):
    """A session or diagnosis step cannot run: no server and no launch command, a port that is no
    TCP port, an earlier run that left the box changed and could not be restored, ..."""


class LaunchRefused(DiagnosisError):
    """A launch refused before anything on the box changed: the doctor, run on the exact command
    about to be launched, has error findings whose fault stops the server from starting
    (``Finding.prevents_start``), so the launch would only be spent (on a large target, many
    minutes) to fail. ``launch_command``: the command (text, as given); ``label``: the step that
    wanted it (``as-found``, ``probe``, ``fix``, a candidate, a sweep setting); ``findings``: those
    findings (:class:`workbench.rules.finding.Finding`). ``str()`` names each rule and message.
    The runbooks' ``force_launch`` parameter launches anyway."""

    def __init__(self, launch_command: str, label: str, findings: Sequence):
        self.launch_command = launch_command
        self.label = label
        self.findings = list(findings)
        reasons = "; ".join(f"{f.rule}: {f.message}" for f in self.findings)
        super().__init__(f"launch refused ({label}): the doctor's findings say the server would not start — "
                         f"{reasons} (force_launch=True launches anyway)")


class GpusHeld(LaunchRefused):
    """A launch refused before it was made because GPU memory on the GPUs it would use is held by
    processes that are not this run's (:mod:`workbench.session.gpu_guard`): another user's
    (never killed), a live server's, or orphans of an earlier SGLang launch of this user that
    ``reclaim_gpus`` was not given to clean up. ``holders``: the table (dicts: ``pid``, ``title``,
    ``user``, ``mib`` per GPU index, ``why``); ``orphans``: the pids that ``reclaim_gpus=True``
    would clean up; ``findings``: one ``gpus-held`` finding per holder (what
    :class:`LaunchRefused` carries, so the diagnosis records it as a refused launch). ``force_launch``
    does not override it: the launch would run out of memory."""

    def __init__(self, launch_command: str, label: str, findings: Sequence, *, holders: Sequence[dict] = (),
                 orphans: Sequence[int] = (), message: str = ""):
        self.launch_command, self.label, self.findings = launch_command, label, list(findings)
        self.holders, self.orphans = list(holders), list(orphans)
        DiagnosisError.__init__(self, message or f"launch refused ({label}): GPU memory held by processes "
                                                  "that are not this run's")


class GpusTooFew(LaunchRefused):
    """A launch refused before it was made because it needs more GPUs than the box has (its
    ``--tp-size`` x ``--pp-size`` x ``--dp-size`` from ``--base-gpu-id``, or vLLM's sizes, against
    the GPUs ``nvidia-smi`` lists: :mod:`workbench.session.gpu_guard`). SGLang 0.5.23 would fail at
    start-up on the first rank without a device ("CUDA error: invalid device ordinal",
    distributed/bootstrap.py). ``needed``: the GPU indices the launch uses; ``available``: how many
    the box has; ``findings``: one ``gpus-too-few`` finding. ``force_launch`` does not override it."""

    def __init__(self, launch_command: str, label: str, findings: Sequence, *, needed: Sequence[int] = (),
                 available: int = 0, message: str = ""):
        self.launch_command, self.label, self.findings = launch_command, label, list(findings)
        self.needed, self.available = list(needed), int(available)
        DiagnosisError.__init__(self, message or f"launch refused ({label}): it needs GPUs {self.needed}, "
                                                  f"the box has {self.available}")


class ServerStoppedAnswering(DiagnosisError):
    """The server a diagnosis step was talking to stopped answering in the middle of the run: its
    process exited (killed, crashed), or it still exists but answers nothing (stopped by SIGSTOP,
    hung) within the per-request time-out. Raised inside :class:`workbench.diagnosis.DiagnosisRun`
    and turned there into the verdict ``inconclusive: server stopped answering`` (never out of a
    step).

    ``server``: which server (``"the server as found"``, ``"the probe server"``, ``"the fix
    server"``, ...); ``port``: its TCP port; ``pid``: its process id (``None`` when unknown);
    ``state``: what the box said of that process after the failure (``"exited"``, ``"stopped"``
    — SIGSTOP, state T —, ``"running"``: it lives and does not answer, ``"unknown"``); ``step``:
    the diagnosis step (``measure_symptom``, ``probe``, ``apply_fixes``, ``attribute``) and
    ``what``: what it was doing (``measuring: as found ...``); ``error``: the failed request, one
    line; ``log_tail``: the server log's last lines (possibly empty); ``log_path``."""

    def __init__(self, *, server: str, port: int | None, pid: int | None, state: str, step: str, what: str,
                 error: str, log_tail: Sequence[str] = (), log_path: str | None = None):
        self.server, self.port, self.pid, self.state = server, port, pid, state
        self.step, self.what, self.error = step, what, error
        self.log_tail = list(log_tail)
        self.log_path = log_path
        super().__init__(self.describe())

    def describe(self) -> str:
        """One line: ``server stopped answering: the fix server (pid 123, port 30000) exited during
        apply_fixes (measuring: fix): POST ... failed: ...``."""
        where = ", ".join(x for x in (f"pid {self.pid}" if self.pid is not None else "",
                                       f"port {self.port}" if self.port is not None else "") if x)
        state = {"exited": "exited", "stopped": "is stopped (SIGSTOP: it accepts connections and never answers)",
                 "running": "still runs but answers nothing", "unknown": "is in an unknown state"}.get(
            self.state, self.state)
        return (f"server stopped answering: {self.server} ({where}) {state} during {self.step} ({self.what}): "
                f"{self.error}")

    def to_dict(self) -> dict:
        """The fields as plain JSON (``message`` is :meth:`describe`)."""
        return {"server": self.server, "port": self.port, "pid": self.pid, "state": self.state, "step": self.step,
                "what": self.what, "error": self.error, "log_path": self.log_path, "log_tail": list(self.log_tail),
                "message": self.describe()}


class ReportError(WorkbenchError, RuntimeError):
    """The report could not be exported, or the exported HTML would not be self-contained."""


class BrowserNotFound(ReportError):
    """No Chromium / Chrome binary on this machine (install the Debian package ``chromium``)."""


class BrowserError(ReportError):
    """Chromium ran but failed or timed out; ``stderr`` holds its last output."""

    def __init__(self, message: str, stderr: str = ""):
        self.stderr = stderr
        super().__init__(message + (f"\n--- chromium stderr (tail) ---\n{stderr[-3000:]}" if stderr else ""))
