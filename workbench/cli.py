"""The ``workbench`` command line.

    workbench runbook NAME [-p KEY VALUE]... [--report-dir DIR]   run runbooks/NAME.ipynb with papermill,
                                                                  then export NAME.html beside NAME.json
    workbench report NOTEBOOK [--html OUT]                        export an executed notebook to one HTML file
    workbench restore [--host SPEC]                               undo what an interrupted diagnosis left
    workbench doctor --launch "CMD" [--cwd DIR] | --running [--host SPEC] [--json]   every preflight rule on a launch
                                                                  command or the running server

Exit codes: 0 success (doctor: no error finding), 1 a failure (doctor: at least one error
finding), 2 the command itself could not run (bad arguments, unreachable box).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

#: Set in the environment of a runbook run by ``workbench runbook``: the driver restores the
#: box itself when the run fails or is interrupted, so the kernel must not race it at exit.
DRIVER_ENV = "EAGLE_WORKBENCH_DRIVER"


def runbooks_dir() -> Path:
    """The repository's ``runbooks/`` folder (next to the ``workbench`` package)."""
    return Path(__file__).resolve().parent.parent / "runbooks"


#: Python spellings papermill's CLI also reads as literals (papermill cli.py ``_resolve_type``).
_PY_LITERALS = {"True": True, "False": False, "None": None}


def _coerce(value: str) -> Any:
    """A ``-p`` value as papermill's CLI reads it: ``True``/``False``/``None`` (the spelling the
    parameters cell uses), JSON if it parses (numbers, true/false, null, lists), else the string."""
    if value in _PY_LITERALS:
        return _PY_LITERALS[value]
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _positive_seconds(text: str) -> float:
    """argparse type: a number of seconds > 0 (argparse turns the ValueError into a usage error)."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _kill_kernels() -> list[int]:
    """SIGKILL the kernels this process started (papermill leaves them when interrupted), so that
    none of them goes on changing the box while it is restored."""
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
                export: bool = True) -> dict[str, Path]:
    """Execute ``runbooks/NAME.ipynb`` with papermill into ``report_dir/NAME.ipynb`` and export
    ``report_dir/NAME.html``. The executed notebook is written even when a cell fails (papermill
    saves it with the failing cell marked), and exported too. When the run fails or is
    interrupted (SIGINT, SIGTERM), the kernel is killed and the box restored from its journal
    (:func:`workbench.journal.restore_box`) before the error propagates.

    Returns ``{"notebook": ..., "html": ..., "json": ...}`` (paths; ``json`` is written by the
    runbook itself). Raises ``FileNotFoundError`` for an unknown runbook, papermill's
    ``PapermillExecutionError`` for a failing cell, ``KeyboardInterrupt`` when interrupted.
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
    # SIGTERM (a kill) and SIGHUP (a closed terminal, a dropped SSH session) end the run like Ctrl-C.
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    # A verdict from an earlier run must not sit beside the report of this one if this one fails.
    (out_dir / f"{name}.json").unlink(missing_ok=True)
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
            _restore_after_failure(host, server_start_timeout=float(params.get("server_start_timeout") or 600))
        except Exception as exc:  # noqa: BLE001 - reported, the run's error follows
            print(f"restore FAILED: {type(exc).__name__}: {exc}\n"
                  f"run `workbench restore --host {host}` once the cause is fixed", file=sys.stderr)
        finally:
            for sig, handler in held.items():
                signal.signal(sig, handler)
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
    if export:
        paths["html"] = export_html(notebook, out_dir / f"{name}.html")
    return paths


def _restore_after_failure(host: str, *, server_start_timeout: float = 600.0) -> None:
    from remote import connect
    from workbench.journal import restore_box

    from remote.errors import BoxSpecError

    try:
        box = connect(host)
    except BoxSpecError as exc:
        print(f"restore: nothing to restore, the box was never reached ({exc})", file=sys.stderr)
        return
    try:
        # The kernel was killed above, so its journal's owner is gone; a journal owned by another
        # diagnosis that still runs is left alone.
        report = restore_box(box, server_start_timeout=server_start_timeout, unless_owner_alive=True)
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


def _journal_pending(host: str) -> bool | str:
    """False when the box's journal has nothing pending, True when it has, else why it could not
    be read (a string)."""
    from remote import connect
    from remote.errors import RemoteError
    from workbench.journal import Journal, JournalError

    try:
        with connect(host) as box:
            return bool(Journal(box).pending)
    except (RemoteError, OSError, ValueError, JournalError) as exc:
        return f"could not read the journal: {type(exc).__name__}: {exc}"


def _cmd_runbook(args: argparse.Namespace) -> int:
    from papermill.exceptions import PapermillExecutionError

    if not (runbooks_dir() / f"{args.name}.ipynb").is_file():
        known = sorted(p.stem for p in runbooks_dir().glob("*.ipynb"))
        print(f"workbench runbook: no runbook {args.name!r} in {runbooks_dir()} "
              f"(known: {', '.join(known) or 'none'})", file=sys.stderr)
        return 2
    params = {key: _coerce(value) for key, value in (args.parameters or [])}
    if args.host:
        if "host" in params and params["host"] != args.host:
            print(f"workbench runbook: --host {args.host} and -p host {params['host']} disagree; give one",
                  file=sys.stderr)
            return 2
        params["host"] = args.host
    unknown = sorted(set(params) - set(_runbook_parameters(args.name)))
    if unknown:
        print(f"workbench runbook: {args.name} has no parameter {', '.join(map(repr, unknown))} "
              f"(its parameters: {', '.join(_runbook_parameters(args.name))})", file=sys.stderr)
        return 2
    try:
        paths = run_runbook(args.name, params, args.report_dir)
    except FileNotFoundError as exc:
        print(f"workbench runbook: {exc}", file=sys.stderr)
        return 2
    except PapermillExecutionError as exc:
        print(f"workbench runbook: cell {exc.cell_index} failed: {exc.ename}: {exc.evalue}\n"
              f"the executed notebook (with the failing cell) is in {args.report_dir}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        host = params.get("host") or "local"
        pending = _journal_pending(host)
        if pending is False:
            print("workbench runbook: interrupted; the box was restored (see above)", file=sys.stderr)
        else:
            print(f"workbench runbook: interrupted; the box may still be changed ({pending or 'journal pending'}): "
                  f"run `workbench restore --host {host}`", file=sys.stderr)
        return 130
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from workbench.report import ReportError, export_html

    if not Path(args.notebook).is_file():
        print(f"workbench report: no notebook file {args.notebook}", file=sys.stderr)
        return 2
    import nbformat

    html = args.html or str(Path(args.notebook).with_suffix(".html"))
    try:
        print(export_html(args.notebook, html, require_executed=False))
    except ReportError as exc:
        print(f"workbench report: {exc}", file=sys.stderr)
        return 1
    except (nbformat.ValidationError, json.JSONDecodeError, UnicodeDecodeError, KeyError, AttributeError) as exc:
        print(f"workbench report: {args.notebook} is not a Jupyter notebook (.ipynb) "
              f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})", file=sys.stderr)
        return 2
    return 0


def _cmd_restore(args: argparse.Namespace) -> int:
    from remote import connect
    from remote.errors import RemoteError
    from workbench.journal import JournalError, restore_box

    try:
        box = connect(args.host)
    except RemoteError as exc:
        print(f"workbench restore: {exc}", file=sys.stderr)
        return 2
    try:
        report = restore_box(box)
    except (JournalError, RemoteError) as exc:
        print(f"workbench restore: {exc}", file=sys.stderr)
        return 2
    finally:
        box.close()
    if not report.actions and not report.problems:
        print("nothing to restore")
    for line in report.actions:
        print(line)
    for line in report.problems:
        print(f"FAILED: {line}", file=sys.stderr)
    return 0 if report.clean else 1


def _cmd_doctor(args: argparse.Namespace) -> int:
    """``workbench doctor``: every static rule (:func:`workbench.doctor.run_doctor`) on a launch
    command (``--launch``) or on the server already running on the box (``--running``: its
    command line from ``Box.find_servers``, relative paths against its cwd). Exit 0 / 1 / 2."""
    from remote import connect
    from remote.errors import RemoteError
    from workbench.checkpoint import CheckpointError
    from workbench.doctor import DoctorError, run_doctor
    from workbench.launch import LaunchCommand, LaunchCommandError

    if (args.launch is not None) == bool(args.running):
        print("workbench doctor: give exactly one of --launch \"<command>\" or --running", file=sys.stderr)
        return 2
    try:
        launch = LaunchCommand.parse(args.launch) if args.launch is not None else None
        box = connect(args.host)
    except (LaunchCommandError, RemoteError) as exc:
        print(f"workbench doctor: {exc}", file=sys.stderr)
        return 2
    try:
        cwd = None
        if launch is not None:
            cwd = args.cwd or (str(Path.cwd()) if box.name == "local" else box.expand_path("~"))
        else:
            from workbench.diagnose import _is_launch_argv

            servers = [s for s in box.find_servers(timeout=args.timeout) if _is_launch_argv(s.argv)]
            if args.port:
                servers = [s for s in servers if s.port == args.port]
            if not servers:
                print(f"workbench doctor: no SGLang server running on {box.name}"
                      + (f" on port {args.port}" if args.port else ""), file=sys.stderr)
                return 2
            if len(servers) > 1:
                print(f"workbench doctor: {len(servers)} servers run on {box.name} (ports "
                      f"{', '.join(str(s.port) for s in servers)}); pick one with --port", file=sys.stderr)
                return 2
            launch, cwd = LaunchCommand.parse(list(servers[0].argv)), servers[0].cwd
        report = run_doctor(box, launch, timeout=args.timeout, cwd=cwd)
    except (DoctorError, CheckpointError, RemoteError, LaunchCommandError) as exc:
        print(f"workbench doctor: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        box.close()
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(report.to_text())
    return report.exit_code


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``workbench`` command."""
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("runbook", help="run a papermill runbook and export its HTML report")
    p.add_argument("name", help="runbook name (a file in runbooks/, without .ipynb)")
    p.add_argument("-p", "--parameter", dest="parameters", nargs=2, action="append", metavar=("KEY", "VALUE"),
                   help="a runbook parameter (values parsed as JSON when they parse)")
    p.add_argument("--host", help="the box: local, an ~/.ssh/config alias, user@host[:port]")
    p.add_argument("--report-dir", default="reports", help="where NAME.ipynb/.html/.json go (default: reports)")
    p.set_defaults(func=_cmd_runbook)

    p = sub.add_parser("report", help="export an executed notebook to one self-contained HTML file")
    p.add_argument("notebook")
    p.add_argument("--html", help="output path (default: the notebook's path with .html)")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("restore", help="undo what an interrupted diagnosis left on the box")
    p.add_argument("--host", default="local")
    p.set_defaults(func=_cmd_restore)

    p = sub.add_parser("doctor", help="static checks of a launch command against the box's files")
    p.add_argument("--launch", help="the server's launch command")
    p.add_argument("--running", action="store_true", help="check the command line of the server running on the box")
    p.add_argument("--port", type=int, help="with --running: the server's port when several run")
    p.add_argument("--cwd", help="with --launch: the directory the server starts in, for relative paths in the "
                                 "command (default: this directory on the local box, the login directory over SSH)")
    p.add_argument("--host", default="local")
    p.add_argument("--json", action="store_true")
    p.add_argument("--timeout", type=_positive_seconds, default=30.0,
                   help="seconds for each call to the box (default 30)")
    p.set_defaults(func=_cmd_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``workbench`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
