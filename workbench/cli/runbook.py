"""``workbench runbook``: run a papermill runbook, export its HTML report, restore the box when the
run fails or is interrupted.

    workbench runbook NAME [-p KEY VALUE]... [--host SPEC] [--force-launch] [--watchdog-after S] [--report-dir DIR]
                      [--timeout S]

Runs ``runbooks/NAME.ipynb`` into ``DIR/NAME.ipynb`` (default ``reports/``) and exports
``DIR/NAME.html`` beside the ``NAME.json`` the runbook writes. ``-p`` values are read as papermill's
CLI reads them (``True``/``False``/``None``, JSON when it parses, else the text); a key the
runbook's ``parameters`` cell does not have is refused; ``--host SPEC`` is short for ``-p host
SPEC``, ``--force-launch`` for ``-p force_launch True`` (the runbooks that launch servers: launch
even what the doctor's findings say will not start), ``--watchdog-after S`` for ``-p watchdog_after_s S``
(the runbooks that change the box: seconds of silence of the run's heartbeat after which its
watchdog on the box restores the box itself, default 300, 0 for no watchdog:
:mod:`workbench.session.watchdog`). When a cell fails or the run is interrupted (Ctrl-C, SIGTERM, SIGHUP) the kernel is
killed and the box restored from its journal (``--timeout``: seconds for each box call of that
restore), and the executed notebook is still written and exported.

Every ``-p`` value is checked against the runbook's schema (:mod:`workbench.runbook_params`)
before any kernel starts: every bad one is named at once with what it must be (exit 2).

Exit codes: 0 the runbook ran, 1 a cell failed (the box restored), 2 the command could not run (no
such runbook or parameter, a parameter value the runbook does not take, ``--host`` and ``-p host``
disagree, a box that cannot be reached at all: ``cannot reach box SPEC: WHY; nothing was changed``,
before any kernel starts), 130 interrupted (the box restored, or the ``workbench restore`` to run).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

from workbench.cli.argtypes import watchdog_seconds
from workbench.cli.common import BoxUnreachable, CliError, ExitCode, HOST_HELP, add_box_options, set_command

__all__ = ["DRIVER_ENV", "RunbookInterrupted", "add_parser", "coerce_parameter", "run_runbook",
           "runbooks_dir"]

#: Set in the environment of a runbook run by ``workbench runbook``: the driver restores the
#: box itself when the run fails or is interrupted, so the kernel must not race it at exit.
DRIVER_ENV = "EAGLE_WORKBENCH_DRIVER"


def runbooks_dir() -> Path:
    """The runbooks: ``workbench/runbooks/`` (in a checkout a link to the repository's ``runbooks/``;
    in an installed package a copy of it, package data)."""
    return Path(__file__).resolve().parents[1] / "runbooks"


#: Python spellings papermill's CLI also reads as literals (papermill cli.py ``_resolve_type``).
_PY_LITERALS = {"True": True, "False": False, "None": None}


def coerce_parameter(value: str) -> Any:
    """A ``-p`` value as papermill's CLI reads it: ``True``/``False``/``None`` (the spelling the
    parameters cell uses), JSON if it parses (numbers, true/false, null, lists), else the string."""
    if value in _PY_LITERALS:
        return _PY_LITERALS[value]
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


class RunbookInterrupted(KeyboardInterrupt):
    """A runbook run ended by an interrupt: a signal to the driver (SIGINT, SIGTERM, SIGHUP), the
    kernel interrupted or dead, or whatever papermill/ZMQ raised while the run was being
    interrupted. ``reason``: one line (``SIGTERM to the driver``, ``the kernel died``);
    ``restored``: True when the box was restored (or nothing was left changed), else why not;
    ``pending``: what the journal said right after the restore, read over the restore's own
    connection (False: nothing pending, True: pending, a string: why it could not be read).
    Raised by :func:`run_runbook` after the kernel was killed and the box restored."""

    def __init__(self, reason: str, restored: "bool | str" = True, pending: "bool | str" = False):
        super().__init__(reason)
        self.reason = reason
        self.restored = restored
        self.pending = pending


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _interrupt_reason(exc: BaseException, signals: list[str]) -> str | None:
    """Why the run stopped, when it was an interrupt (one line), else None (a failing cell, or a
    bug that keeps its traceback). A signal the driver received wins over what papermill, nbclient
    or ZMQ raised while it was being interrupted (a ``ZMQError``, a ``RuntimeError`` from a closed
    loop, a ``DeadKernelError``: how the interrupt surfaced, never a bug)."""
    from nbclient.exceptions import DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    if signals:
        first = signals[0]
        return "Ctrl-C (SIGINT)" if first == "SIGINT" else f"{first} to the driver"
    if isinstance(exc, KeyboardInterrupt):
        return "Ctrl-C (SIGINT)"
    if isinstance(exc, PapermillExecutionError) and exc.ename == "KeyboardInterrupt":
        return "the kernel was interrupted (SIGINT to the kernel)"
    if isinstance(exc, DeadKernelError):
        return "the kernel died (killed by a signal, or out of memory)"
    return None


#: prctl(2) option: the signal a process gets when its parent dies (linux/prctl.h)
PR_SET_PDEATHSIG = 1


def _dies_with(driver_pid: int) -> Callable[[], None]:
    """The kernel's ``preexec_fn``: on Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so that a
    driver killed with SIGKILL (which runs no clean-up) takes its kernel with it. jupyter_client
    starts kernels in a session of their own, so a kill of the driver's process group misses
    the kernel; left alive, it would hold the box's run lock (``workbench restore`` then refuses:
    the run looks alive) with nobody to run its remaining cells or restore the box. A driver that
    died before the call (the child's parent is no longer ``driver_pid``) ends the child at once.
    Elsewhere nothing: ipykernel's parent poller ends an orphaned kernel within about a second."""
    def preexec() -> None:
        if not sys.platform.startswith("linux"):
            return
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != driver_pid:
            os._exit(1)

    return preexec


def _kernel_manager_class(stderr: Any) -> type:
    """A jupyter kernel manager whose kernel writes its own stderr (fd 2: ipykernel's log, the
    ZMQ errors of a kernel torn down mid-message) to the open file ``stderr``, not to the
    terminal (cell output still goes to the notebook), and that dies with the driver
    (:func:`_dies_with`). Given to papermill as
    ``kernel_manager_class`` (nbclient's trait; ``_async_launch_kernel`` is jupyter_client's
    documented override point)."""
    from jupyter_client.manager import AsyncKernelManager

    class _KernelManager(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            kw["stderr"] = stderr
            kw["preexec_fn"] = _dies_with(os.getpid())
            await super()._async_launch_kernel(kernel_cmd, **kw)

    return _KernelManager


#: loggers of the driver's side of a papermill run (nbclient logs through papermill's logger)
_RUN_LOGGERS = ("papermill", "nbclient", "jupyter_client", "traitlets")
#: what a kernel torn down by an interrupt leaves behind in nbclient's asyncio tasks
_TEARDOWN_ERRORS = {"DeadKernelError", "ZMQError", "KeyboardInterrupt", "CancelledError", "CellTimeoutError"}


class _InterruptedTaskFilter(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" for an nbclient task that died of the
    interrupt (its kernel gone: ``DeadKernelError``, a closed ZMQ socket, ...). It is printed when
    the task is garbage-collected, at exit, after the run's own last line. Anything else passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (str(record.msg).startswith("Task exception was never retrieved") and exc is not None
                    and type(exc).__name__ in _TEARDOWN_ERRORS)


#: The ``RuntimeWarning`` of an nbclient coroutine the interrupt abandoned before it was awaited
#: (``coroutine 'NotebookClient.async_execute_cell' was never awaited``: the signal landed between
#: papermill making the cell's coroutine and awaiting it). Printed when it is garbage-collected, at
#: exit, after the run's own last line; nbclient 0.10, ``client.py``.
ABANDONED_COROUTINE = r"coroutine 'NotebookClient\.\w+' was never awaited"


def _quiet_interrupted_tasks() -> None:
    """Install :class:`_InterruptedTaskFilter` on the ``asyncio`` logger (once), and ignore the
    :data:`ABANDONED_COROUTINE` warning: both are the interrupt's own debris, never news."""
    log = logging.getLogger("asyncio")
    if not any(isinstance(f, _InterruptedTaskFilter) for f in log.filters):
        log.addFilter(_InterruptedTaskFilter())
    warnings.filterwarnings("ignore", message=ABANDONED_COROUTINE, category=RuntimeWarning)


def _kill_kernels() -> list[int]:
    """SIGKILL the kernels this process started (papermill leaves them when interrupted), so that
    none of them goes on changing the box while it is restored. Returns their pids."""
    import psutil

    killed = []
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.NoSuchProcess:
            continue
        killed.append(child)
    psutil.wait_procs(killed, timeout=10)
    return [child.pid for child in killed]


def run_runbook(name: str, parameters: dict[str, Any], report_dir: str | Path, *, kernel_name: str = "python3",
                export: bool = True, timeout: float = 30.0, connect_timeout: float | None = None) -> dict[str, Path]:
    """Execute ``runbooks/NAME.ipynb`` with papermill into ``report_dir/NAME.ipynb`` and export
    ``report_dir/NAME.html``. The executed notebook is written even when a cell fails (papermill
    saves it with the failing cell marked), and exported too. When the run fails or is
    interrupted (SIGINT, SIGTERM, SIGHUP), the kernel is killed and the box (``parameters["host"]``,
    default local) restored from its journal (:func:`workbench.session.journal.restore_box`, each
    box call bounded by ``timeout`` seconds, the connection by ``connect_timeout``, ``None``: the
    ssh config's) before the error propagates; a failure of that restore is printed on stderr,
    never raised in place of the run's error.

    Returns ``{"notebook": ..., "json": ..., "html": ...}`` (paths; ``json`` is written by the
    runbook itself; no ``html`` when ``export`` is false). Raises ``FileNotFoundError`` for an
    unknown runbook, papermill's ``PapermillExecutionError`` for a failing cell,
    :class:`RunbookInterrupted` (a ``KeyboardInterrupt``) when interrupted: a signal to the driver,
    the kernel interrupted (a cell ending in ``KeyboardInterrupt``) or dead (``DeadKernelError``),
    or any error papermill/ZMQ raised while a signal was being handled.

    The kernel's own stderr (not the cells' output, which is in the notebook) and the log lines of
    papermill/nbclient go to ``report_dir/NAME.kernel.log``: a kernel torn down by an interrupt
    logs ZMQ tracebacks there, not on the terminal; asyncio's "Task exception was never
    retrieved" for a task that died of the interrupt is dropped.

    Before the run, one line on stderr when a run left the box changed or another run is using
    it (:func:`workbench.cli.common.pending_notice`); a box that cannot be reached at all raises
    :class:`~workbench.cli.common.BoxUnreachable` then, before any kernel starts or any file is
    written (nothing was changed: no restore). The kernel gets ``EAGLE_WORKBENCH_RUNBOOK``
    (the runbook's name, shown to a run that finds the box taken) and ``EAGLE_WORKBENCH_DRIVER``.

    Connections the driver itself opens to the box (the kernel opens its own): one before the run
    (the pending notice and the secrets to redact, :func:`_before_run`), and, when the run failed
    or was interrupted, one for the restore (the restore and the journal's last word read over it,
    :func:`_restore_after_failure`). Over SSH each costs a handshake; a box that cannot be reached
    costs one ``connect_timeout`` each.
    """
    import papermill

    from workbench.report import export_html
    from workbench.session.runlock import RUNBOOK_ENV
    from workbench.session.startup_wait import ProgressRelay

    source = runbooks_dir() / f"{name}.ipynb"
    if not source.exists():
        known = sorted(p.stem for p in runbooks_dir().glob("*.ipynb"))
        raise FileNotFoundError(f"no runbook {name!r} in {runbooks_dir()} (known: {', '.join(known)})")
    out_dir = Path(report_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    notebook = out_dir / f"{name}.ipynb"
    params = dict(parameters)
    params.setdefault("report_dir", str(out_dir))
    host = params.get("host") or "local"
    _before_run(host, params, timeout=timeout, connect_timeout=connect_timeout)
    # SIGINT (Ctrl-C), SIGTERM (a kill) and SIGHUP (a closed terminal, a dropped SSH session) end the
    # run alike, and are remembered: whatever papermill or ZMQ raises while the run is being
    # interrupted is the interrupt, not a bug. A signal the caller set to be ignored (``nohup``
    # ignores SIGHUP) stays ignored.
    received: list[str] = []

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in _SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN}
    # A verdict from an earlier run must not sit beside the report of this one if this one fails.
    (out_dir / f"{name}.json").unlink(missing_ok=True)
    os.environ[DRIVER_ENV] = "1"
    os.environ[RUNBOOK_ENV] = name
    kernel_log = out_dir / f"{name}.kernel.log"
    kernel_stderr = open(kernel_log, "w")
    relay = ProgressRelay(sys.stderr)
    # papermill's and nbclient's own log lines ("Kernel died while waiting for execute reply") go
    # there too: the terminal gets the run's outcome in one line, the log file the details.
    log_handler = logging.StreamHandler(kernel_stderr)
    log_handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    saved_loggers = {}
    for logger_name in _RUN_LOGGERS:
        log = logging.getLogger(logger_name)
        saved_loggers[logger_name] = log.propagate
        log.addHandler(log_handler)
        log.propagate = False
    try:
        # the cells' start-up progress lines (a launch loading) reach this terminal; the rest of
        # their stderr stays in the notebook
        papermill.execute_notebook(str(source), str(notebook), parameters=params, kernel_name=kernel_name,
                                   cwd=str(Path.cwd()), progress_bar=False, stderr_file=relay,
                                   kernel_manager_class=_kernel_manager_class(kernel_stderr))
    except BaseException as exc:
        # Clean up, then re-raise the run's own error: a failure while cleaning up is printed,
        # never allowed to replace it. More signals (an impatient Ctrl-C) must not cut the clean-up
        # short: they wait until it is done.
        held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _SIGNALS}
        try:
            reason = _interrupt_reason(exc, received)
            if reason is not None:
                _quiet_interrupted_tasks()
                print(f"workbench runbook: interrupted: {reason}; killing the kernel and restoring the box",
                      file=sys.stderr)
            try:
                _kill_kernels()
            except Exception as kill_exc:  # noqa: BLE001 - reported, the run's error follows
                print(f"workbench runbook: could not kill the kernel: {kill_exc!r}", file=sys.stderr)
            try:
                restored, pending = _restore_after_failure(
                    host, server_start_timeout=float(params.get("server_start_timeout") or 600), timeout=timeout,
                    connect_timeout=connect_timeout)
            except Exception as restore_exc:  # noqa: BLE001 - reported, the run's error follows
                restored = pending = f"restore failed: {type(restore_exc).__name__}: {restore_exc}"
                print(f"restore FAILED: {type(restore_exc).__name__}: {restore_exc}\n"
                      f"run `workbench restore --host {host}` once the cause is fixed", file=sys.stderr)
            _redact_outputs(notebook, out_dir / f"{name}.json")
            if export and notebook.exists():
                try:
                    export_html(notebook, out_dir / f"{name}.html", require_executed=False)
                except Exception as export_exc:  # noqa: BLE001 - reported, the run's error follows
                    print(f"workbench runbook: could not export {notebook}: {export_exc}", file=sys.stderr)
        finally:
            for sig, handler in held.items():
                signal.signal(sig, handler)
        if reason is not None:
            raise RunbookInterrupted(reason, restored, pending) from exc
        raise
    finally:
        for logger_name, propagate in saved_loggers.items():
            logging.getLogger(logger_name).removeHandler(log_handler)
            logging.getLogger(logger_name).propagate = propagate
        kernel_stderr.close()
        relay.close_line()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.environ.pop(DRIVER_ENV, None)
        os.environ.pop(RUNBOOK_ENV, None)
    paths = {"notebook": notebook, "json": out_dir / f"{name}.json"}
    _redact_outputs(notebook, paths["json"])
    if export:
        paths["html"] = export_html(notebook, out_dir / f"{name}.html")
    return paths


def _before_run(host: str, params: dict[str, Any], *, timeout: float, connect_timeout: float | None) -> None:
    """What the driver reads on the box before the run, over ONE connection: the pending notice
    (:func:`_notice_pending`) and the secrets to redact (:func:`_learn_secrets`). A box that cannot
    be reached at all raises :class:`~workbench.cli.common.BoxUnreachable` (an unknown alias, a
    refused or timed-out connection, a name that does not resolve, an untrusted host key, no key
    accepted): the run then never starts, nothing was changed and nothing is to restore."""
    from workbench.cli.common import connect_box
    from workbench.redact import REDACTOR

    if isinstance(params.get("launch_command"), str):
        REDACTOR.learn_launch(params["launch_command"])
    with connect_box(host, connect_timeout=connect_timeout) as box:
        _notice_pending(box, host, timeout=timeout)
        _learn_secrets(box, timeout=timeout)


def _learn_secrets(box: Any, *, timeout: float) -> None:
    """Teach this process's redactor the secrets of the servers running on ``box`` (argv and
    environment; the ``launch_command`` parameter's are learnt by :func:`_before_run`), so that the
    executed notebook, the verdict and the HTML this driver writes hold none of them even where the
    kernel printed one (:func:`workbench.session.inventory.learn_box_secrets`). A box that cannot be
    read is reported on stderr; the kind rules (flags, variables, token shapes) still apply then."""
    from remote.errors import RemoteError
    from workbench.session.inventory import learn_box_secrets

    try:
        learn_box_secrets(box, timeout=timeout)
    except (RemoteError, OSError, ValueError) as exc:
        print(f"workbench runbook: could not read the box's servers to learn their secrets ({type(exc).__name__}: "
              f"{exc}); only secrets recognised by their kind are redacted in the report", file=sys.stderr)


def _redact_outputs(notebook: Path, verdict: Path) -> None:
    """Redact the executed notebook and the verdict JSON in place (:mod:`workbench.redact`), before
    the HTML is exported from the notebook. A file that cannot be redacted is reported on stderr."""
    from workbench.redact import REDACTOR
    from workbench.report import ReportError, redact_notebook
    from workbench.report.files import atomic_write_text

    if notebook.exists():
        try:
            redact_notebook(notebook)
        except (ReportError, OSError, ValueError) as exc:
            print(f"workbench runbook: could not redact {notebook}: {exc}", file=sys.stderr)
    if verdict.exists():
        try:
            doc = json.loads(verdict.read_text(encoding="utf-8"))
            clean = REDACTOR.obj(doc)
            if clean != doc:
                atomic_write_text(verdict, json.dumps(clean, indent=2, ensure_ascii=False) + "\n")
        except (OSError, ValueError) as exc:
            print(f"workbench runbook: could not redact {verdict}: {exc}", file=sys.stderr)


def _restore_after_failure(host: str, *, server_start_timeout: float = 600.0, timeout: float = 30.0,
                           connect_timeout: float | None = None) -> "tuple[bool | str, bool | str]":
    """Restore ``host`` from its journal after a failed run, over ONE connection, saying what was
    done on stderr; then read the journal once more over the same connection (the run's last word:
    is anything still pending?). Returns ``(restored, pending)``: ``restored`` True when nothing is
    left changed, else what is (one line); ``pending`` False (journal empty), True (pending) or why
    it could not be read (a string). Raises what connecting (other than a spec that names no box)
    or the restore raises."""
    from remote import connect
    from remote.errors import BoxSpecError
    from workbench.session.journal import restore_box

    try:
        box = connect(host, connect_timeout=connect_timeout)
    except BoxSpecError as exc:
        print(f"restore: nothing to restore, the box was never reached ({exc})", file=sys.stderr)
        return True, False
    try:
        # The kernel was killed above, so its journal's owner is gone; a journal owned by another
        # diagnosis that still runs is left alone.
        report = restore_box(box, server_start_timeout=server_start_timeout, timeout=timeout, unless_owner_alive=True)
        pending = _journal_pending(box, timeout=timeout)
    finally:
        box.close()
    for line in report.actions:
        print(f"restore: {line}", file=sys.stderr)
    for line in report.problems:
        print(f"restore FAILED: {line}", file=sys.stderr)
    return (True if report.clean else "; ".join(report.problems)), pending


def _notice_pending(box: Any, host: str, *, timeout: float) -> None:
    """Say on stderr, in one line, when a run left ``box`` (the spec ``host``) changed (this run
    restores it first, in :func:`workbench.session.open_box`) or another run is using it
    (:func:`workbench.cli.common.pending_notice`, which never raises for a box it cannot read)."""
    from workbench.cli.common import pending_notice

    line = pending_notice(box, host, timeout=min(timeout, 10.0))
    if line:
        print(f"workbench runbook: {line}", file=sys.stderr)


def _runbook_parameters(name: str) -> list[str]:
    """Names in the runbook's ``parameters`` cell (papermill's ``inspect_notebook``)."""
    import papermill

    return list(papermill.inspect_notebook(str(runbooks_dir() / f"{name}.ipynb")))


def _journal_pending(box: Any, *, timeout: float) -> bool | str:
    """False when ``box``'s journal has nothing pending, True when it has, else why it could not
    be read (a string)."""
    from remote.errors import RemoteError
    from workbench.session.journal import Journal, JournalError

    try:
        return bool(Journal(box, timeout=timeout).pending)
    except (RemoteError, OSError, ValueError, JournalError) as exc:
        return f"could not read the journal: {type(exc).__name__}: {exc}"


def _check_parameters(name: str, params: dict[str, Any]) -> None:
    """Refuse, before any kernel starts, every ``-p`` name the runbook's ``parameters`` cell does
    not have and every value its schema (:mod:`workbench.runbook_params`) refuses, all in one
    :class:`CliError` (exit 2): each bad value named with what it must be, the same message the
    runbook's own first cell gives."""
    from workbench.errors import RunbookParameterError
    from workbench.runbook_params import check_runbook_parameters

    known = _runbook_parameters(name)
    problems = []
    unknown = sorted(set(params) - set(known))
    if unknown:
        problems.append(f"{name} has no parameter {', '.join(map(repr, unknown))} (its parameters: {', '.join(known)})")
    try:
        check_runbook_parameters(name, params)
    except RunbookParameterError as exc:
        problems.append(str(exc))
    if problems:
        host = params.get("host")
        spec_error = _host_spec_error(host)
        if spec_error is not None and len(problems) == 1 and not unknown and _parameters_ok(
                name, {k: v for k, v in params.items() if k != "host"}):
            # the host is all that is wrong (a mistyped alias): said as connecting says it; with
            # other bad values every one is named below, the host among them
            raise BoxUnreachable(str(host), spec_error)
        raise CliError("; ".join(problems))


def _parameters_ok(name: str, params: dict[str, Any]) -> bool:
    """Whether the runbook's schema takes every value of ``params``."""
    from workbench.errors import RunbookParameterError
    from workbench.runbook_params import check_runbook_parameters

    try:
        check_runbook_parameters(name, params)
    except RunbookParameterError:
        return False
    return True


def _host_spec_error(host: Any) -> Any:
    """The ``remote.errors.BoxSpecError`` resolving ``host`` against the ssh config raises (no
    network: an alias no config defines, a port that is no number), ``None`` when it resolves or
    is no SSH spec."""
    from remote.connect import LOCAL_SPECS
    from remote.errors import BoxSpecError
    from remote.ssh import config_path, load_ssh_config, resolve_target

    if not isinstance(host, str) or not host.strip() or host.strip() in LOCAL_SPECS:
        return None
    try:
        resolve_target(host.strip(), load_ssh_config(config_path()))
    except BoxSpecError as exc:
        return exc
    return None


def _run(args: argparse.Namespace) -> ExitCode:
    """``workbench runbook``: see the module docstring. Raises :class:`CliError`."""
    from papermill.exceptions import PapermillExecutionError

    if not (runbooks_dir() / f"{args.name}.ipynb").is_file():
        known = sorted(p.stem for p in runbooks_dir().glob("*.ipynb"))
        raise CliError(f"no runbook {args.name!r} in {runbooks_dir()} (known: {', '.join(known) or 'none'})")
    params = {key: coerce_parameter(value) for key, value in (args.parameters or [])}
    if args.host:
        if "host" in params and params["host"] != args.host:
            raise CliError(f"--host {args.host} and -p host {params['host']} disagree; give one")
        params["host"] = args.host
    if args.force_launch:
        if params.get("force_launch", True) is not True:
            raise CliError(f"--force-launch and -p force_launch {params['force_launch']} disagree; give one")
        params["force_launch"] = True
    if args.watchdog_after is not None:
        if "watchdog_after_s" in params and params["watchdog_after_s"] != args.watchdog_after:
            raise CliError(f"--watchdog-after {args.watchdog_after:g} and -p watchdog_after_s "
                           f"{params['watchdog_after_s']} disagree; give one")
        params["watchdog_after_s"] = args.watchdog_after
    # One place for the notebook, the HTML and the verdict: -p report_dir is the same thing as --report-dir.
    given = params.get("report_dir")
    if given is not None and args.report_dir is not None and Path(str(given)).resolve() != Path(args.report_dir).resolve():
        raise CliError(f"--report-dir {args.report_dir} and -p report_dir {given} disagree; give one")
    args.report_dir = args.report_dir or (str(given) if given is not None else "reports")
    params["report_dir"] = str(Path(args.report_dir).resolve())
    _check_parameters(args.name, params)
    try:
        paths = run_runbook(args.name, params, args.report_dir, timeout=args.timeout,
                            connect_timeout=args.connect_timeout)
    except FileNotFoundError as exc:
        raise CliError(str(exc)) from exc
    except PapermillExecutionError as exc:
        raise CliError(f"cell {exc.cell_index} failed: {exc.ename}: {exc.evalue}\n"
                       f"the executed notebook (with the failing cell) is in {args.report_dir}",
                       ExitCode.FAILURE) from exc
    except KeyboardInterrupt as exc:
        # RunbookInterrupted (a signal, the kernel interrupted or dead): the kernel is killed and the
        # box restored already, and the journal read once more for the last word over the
        # restore's own connection (no second connection: exc.pending).
        host = params.get("host") or "local"
        reason = getattr(exc, "reason", None) or "Ctrl-C (SIGINT)"
        if not isinstance(exc, RunbookInterrupted):
            # interrupted before papermill started the kernel (the secrets being read): this run
            # changed nothing on the box
            raise CliError(f"interrupted: {reason}, before the runbook started; this run changed nothing on the box",
                           ExitCode.INTERRUPTED) from exc
        pending, restored = exc.pending, exc.restored
        if pending is False and restored is not True:
            pending = restored  # the journal is empty, but the restore did not finish (it says why)
        if pending is False:
            message = f"interrupted: {reason}; the box was restored (see above)"
        else:
            message = (f"interrupted: {reason}; the box may still be changed ({pending or 'journal pending'}): "
                       f"run `workbench restore --host {host}`")
        raise CliError(message, ExitCode.INTERRUPTED) from exc
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    summary = verdict_summary(paths.get("json"))
    if summary is not None:
        print(summary)
    return ExitCode.OK


def _accept(measurement: Any) -> str:
    value = measurement.get("accept_length") if isinstance(measurement, dict) else None
    return f"{value:.3f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "not measured"


def verdict_summary(json_path: str | Path | None) -> str | None:
    """The diagnosis's verdict in one line for the terminal, from the ``diagnose_acceptance.json``
    a diagnosis writes (:meth:`workbench.diagnosis.run.DiagnosisRun.build_verdict`): the outcome
    (with why, when inconclusive), accept length as found → after the fix (3 decimals, or ``not
    measured``), the first launch that did not start when nothing was measured as found (its label
    and exception, 200 characters at most), the root cause's rule, the orphans ``reclaim_gpus``
    stopped, and whether the box was restored (or the fixed server kept: ``keep_fix``). E.g. ``verdict: fixed;
    accept length 1.157 -> 2.356; root cause: algorithm-mismatch; box restored``; a root cause with
    consequences says how many and which (``root cause: hidden-size-mismatch (1 consequence:
    weights-loaded)``). ``None`` for a
    file that is missing, unreadable or not a diagnosis verdict (the other runbooks' JSON): the
    paths printed above say where to look. Never raises."""
    if json_path is None:
        return None
    try:
        verdict = json.loads(Path(json_path).read_text())
    except OSError as exc:
        logging.getLogger(__name__).debug("no verdict line: %s: %s", json_path, exc)
        return None
    except ValueError as exc:
        logging.getLogger(__name__).warning("no verdict line: %s is not JSON: %s", json_path, exc)
        return None
    if not isinstance(verdict, dict) or not isinstance(verdict.get("outcome"), str):
        return None
    parts = [f"verdict: {verdict['outcome']}" + (f" ({verdict['outcome_detail']})"
                                                 if isinstance(verdict.get("outcome_detail"), str) else "")]
    acceptance = verdict.get("acceptance") if isinstance(verdict.get("acceptance"), dict) else {}
    parts.append(f"accept length {_accept(acceptance.get('before'))} -> {_accept(acceptance.get('after'))}")
    before = acceptance.get("before") if isinstance(acceptance.get("before"), dict) else {}
    failures = [f for f in verdict.get("start_failures") or [] if isinstance(f, dict)]
    if before.get("accept_length") is None and failures:
        first = failures[0]
        death = first.get("death") if isinstance(first.get("death"), dict) else {}
        parts.append(f"the server did not start ({first.get('label')}: "
                     f"{str(first.get('exception') or first.get('error') or 'see the report')[:200]}"
                     + (f"; died in {death.get('step')}" if death.get("step") else "") + ")")
        attribution = death.get("attribution") if isinstance(death.get("attribution"), dict) else {}
        if attribution and not attribution.get("explained"):
            parts.append("a start-up death the rules do not explain")
    root = verdict.get("root_cause")
    if isinstance(root, dict) and root.get("rule"):
        cons = root.get("consequences") if isinstance(root.get("consequences"), list) else []
        parts.append(f"root cause: {root['rule']}" + (f" ({len(cons)} consequence{'' if len(cons) == 1 else 's'}: "
                                                      + ", ".join(str(c.get('hypothesis')) for c in cons
                                                                  if isinstance(c, dict)) + ")" if cons else ""))
    restore = verdict.get("restore")
    fix = verdict.get("fix") if isinstance(verdict.get("fix"), dict) else {}
    kept = fix.get("kept_server") if isinstance(fix.get("kept_server"), dict) else None
    reclaimed = [p for e in (verdict.get("gpu_events") or []) if isinstance(e, dict) and e.get("event") == "reclaim"
                 for p in (e.get("reclaimed") or []) if isinstance(p, dict)]
    if reclaimed:
        parts.append(f"reclaim_gpus stopped orphaned pids {', '.join(str(p.get('pid')) for p in reclaimed)}")
    if isinstance(restore, dict) and restore.get("clean") and kept:
        parts.append(f"the fixed server (pid {kept.get('pid')}) kept in place of the one found")
    elif isinstance(restore, dict):
        parts.append("box restored" if restore.get("clean") else
                     "box NOT fully restored: " + "; ".join(map(str, restore.get("problems") or ["see the report"])))
    return "; ".join(parts)


def add_parser(sub: Any) -> None:
    """Register ``workbench runbook`` on the CLI's subparsers (``argparse`` ``add_subparsers()``)."""
    p = sub.add_parser("runbook", help="run a papermill runbook and export its HTML report",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="runbook name (a file in runbooks/, without .ipynb)")
    p.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append", metavar=("KEY", "VALUE"),
                   help="a runbook parameter (values parsed as JSON when they parse)")
    add_box_options(p, timeout=30.0, host_default=None, host_help=HOST_HELP + "; the same as -p host SPEC",
                    timeout_help="each call to the box when it is restored after a failed or interrupted run")
    p.add_argument("--report-dir", default=None,
                   help="where NAME.ipynb/.html/.json go (default: -p report_dir when given, else reports)")
    p.add_argument("--force-launch", action="store_true",
                   help="launch even what the doctor's findings say will not start (the same as -p force_launch True; "
                        "diagnose_acceptance, measure_acceptance, compare_drafts)")
    p.add_argument("--watchdog-after", type=watchdog_seconds, default=None, metavar="S",
                   help="seconds of silence of the run's heartbeat (driver killed, connection lost) after which a "
                        "watchdog on the box restores it; 0: no watchdog (the same as -p watchdog_after_s S; default "
                        "300; diagnose_acceptance, measure_acceptance, compare_drafts)")
    set_command(p, _run)
