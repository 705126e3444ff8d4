"""``workbench runbook``: run a papermill runbook, export its HTML report, restore the box when the
run fails or is interrupted.

    workbench runbook NAME [-p KEY VALUE]... [--host SPEC] [--force-launch] [--report-dir DIR] [--timeout S]

Runs ``runbooks/NAME.ipynb`` into ``DIR/NAME.ipynb`` (default ``reports/``) and exports
``DIR/NAME.html`` beside the ``NAME.json`` the runbook writes. ``-p`` values are read as papermill's
CLI reads them (``True``/``False``/``None``, JSON when it parses, else the text); a key the
runbook's ``parameters`` cell does not have is refused; ``--host SPEC`` is short for ``-p host
SPEC``, ``--force-launch`` for ``-p force_launch True`` (the runbooks that launch servers: launch
even what the doctor's findings say will not start). When a cell fails or the run is interrupted (Ctrl-C, SIGTERM, SIGHUP) the kernel is
killed and the box restored from its journal (``--timeout``: seconds for each box call of that
restore), and the executed notebook is still written and exported.

Every ``-p`` value is checked against the runbook's schema (:mod:`workbench.runbook_params`)
before any kernel starts: every bad one is named at once with what it must be (exit 2).

Exit codes: 0 the runbook ran, 1 a cell failed (the box restored), 2 the command could not run (no
such runbook or parameter, a parameter value the runbook does not take, ``--host`` and ``-p host``
disagree), 130 interrupted (the box restored, or the ``workbench restore`` to run).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from workbench.cli.common import CliError, ExitCode, HOST_HELP, add_box_options, set_command

__all__ = ["DRIVER_ENV", "add_parser", "coerce_parameter", "run_runbook", "runbooks_dir"]

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


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


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
    ``KeyboardInterrupt`` when interrupted.
    """
    import papermill

    from workbench.report import export_html

    source = runbooks_dir() / f"{name}.ipynb"
    if not source.exists():
        known = sorted(p.stem for p in runbooks_dir().glob("*.ipynb"))
        raise FileNotFoundError(f"no runbook {name!r} in {runbooks_dir()} (known: {', '.join(known)})")
    out_dir = Path(report_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    notebook = out_dir / f"{name}.ipynb"
    params = dict(parameters)
    params.setdefault("report_dir", str(out_dir))
    # SIGTERM (a kill) and SIGHUP (a closed terminal, a dropped SSH session) end the run like Ctrl-C;
    # a signal the caller set to be ignored (``nohup`` ignores SIGHUP) stays ignored.
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)
                if signal.getsignal(sig) is not signal.SIG_IGN}
    # A verdict from an earlier run must not sit beside the report of this one if this one fails.
    (out_dir / f"{name}.json").unlink(missing_ok=True)
    _learn_secrets(params, timeout=timeout, connect_timeout=connect_timeout)
    os.environ[DRIVER_ENV] = "1"
    try:
        papermill.execute_notebook(str(source), str(notebook), parameters=params, kernel_name=kernel_name,
                                   cwd=str(Path.cwd()), progress_bar=False)
    except BaseException:
        # Clean up, then re-raise the run's own error: a failure while cleaning up is printed,
        # never allowed to replace it.
        try:
            _kill_kernels()
        except Exception as exc:  # noqa: BLE001 - reported, the run's error follows
            print(f"workbench runbook: could not kill the kernel: {exc!r}", file=sys.stderr)
        # A second Ctrl-C must not cut the restore short: the signals wait until it is done.
        held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        host = params.get("host") or "local"
        try:
            _restore_after_failure(host, server_start_timeout=float(params.get("server_start_timeout") or 600),
                                   timeout=timeout, connect_timeout=connect_timeout)
        except Exception as exc:  # noqa: BLE001 - reported, the run's error follows
            print(f"restore FAILED: {type(exc).__name__}: {exc}\n"
                  f"run `workbench restore --host {host}` once the cause is fixed", file=sys.stderr)
        finally:
            for sig, handler in held.items():
                signal.signal(sig, handler)
        _redact_outputs(notebook, out_dir / f"{name}.json")
        if export and notebook.exists():
            try:
                export_html(notebook, out_dir / f"{name}.html", require_executed=False)
            except Exception as exc:  # noqa: BLE001 - reported, the run's error follows
                print(f"workbench runbook: could not export {notebook}: {exc}", file=sys.stderr)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.environ.pop(DRIVER_ENV, None)
    paths = {"notebook": notebook, "json": out_dir / f"{name}.json"}
    _redact_outputs(notebook, paths["json"])
    if export:
        paths["html"] = export_html(notebook, out_dir / f"{name}.html")
    return paths


def _learn_secrets(params: dict[str, Any], *, timeout: float, connect_timeout: float | None) -> None:
    """Teach this process's redactor the secrets of the run: the ``launch_command`` parameter's and
    those of the servers running on the box (argv and environment), so that the executed notebook,
    the verdict and the HTML this driver writes hold none of them even where the kernel printed one
    (:func:`workbench.session.inventory.learn_box_secrets`). A box that cannot be read is reported
    on stderr; the kind rules (flags, variables, token shapes) still apply then."""
    from remote import connect
    from remote.errors import RemoteError
    from workbench.redact import REDACTOR
    from workbench.session.inventory import learn_box_secrets

    if isinstance(params.get("launch_command"), str):
        REDACTOR.learn_launch(params["launch_command"])
    try:
        with connect(params.get("host") or "local", connect_timeout=connect_timeout) as box:
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
                           connect_timeout: float | None = None) -> None:
    """Restore ``host`` from its journal after a failed run, saying what was done on stderr.
    Raises what connecting (other than a spec that names no box) or the restore raises."""
    from remote import connect
    from remote.errors import BoxSpecError
    from workbench.session.journal import restore_box

    try:
        box = connect(host, connect_timeout=connect_timeout)
    except BoxSpecError as exc:
        print(f"restore: nothing to restore, the box was never reached ({exc})", file=sys.stderr)
        return
    try:
        # The kernel was killed above, so its journal's owner is gone; a journal owned by another
        # diagnosis that still runs is left alone.
        report = restore_box(box, server_start_timeout=server_start_timeout, timeout=timeout, unless_owner_alive=True)
    finally:
        box.close()
    for line in report.actions:
        print(f"restore: {line}", file=sys.stderr)
    for line in report.problems:
        print(f"restore FAILED: {line}", file=sys.stderr)


def _runbook_parameters(name: str) -> list[str]:
    """Names in the runbook's ``parameters`` cell (papermill's ``inspect_notebook``)."""
    import papermill

    return list(papermill.inspect_notebook(str(runbooks_dir() / f"{name}.ipynb")))


def _journal_pending(host: str, *, timeout: float, connect_timeout: float | None) -> bool | str:
    """False when the box's journal has nothing pending, True when it has, else why it could not
    be read (a string)."""
    from remote import connect
    from remote.errors import RemoteError
    from workbench.session.journal import Journal, JournalError

    try:
        with connect(host, connect_timeout=connect_timeout) as box:
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
        raise CliError("; ".join(problems))


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
        host = params.get("host") or "local"
        pending = _journal_pending(host, timeout=args.timeout, connect_timeout=args.connect_timeout)
        if pending is False:
            message = "interrupted; the box was restored (see above)"
        else:
            message = (f"interrupted; the box may still be changed ({pending or 'journal pending'}): "
                       f"run `workbench restore --host {host}`")
        raise CliError(message, ExitCode.INTERRUPTED) from exc
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return ExitCode.OK


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
    set_command(p, _run)
