"""The ``workbench`` command line.

    workbench runbook NAME [-p KEY VALUE]... [--report-dir DIR]   run runbooks/NAME.ipynb with papermill,
                                                                  then export NAME.html beside NAME.json
    workbench report NOTEBOOK [--html OUT]                        export an executed notebook to one HTML file
    workbench restore [--host SPEC]                               undo what an interrupted diagnosis left
    workbench doctor --launch "CMD" [--cwd DIR] | --running [--host SPEC] [--json]   every preflight rule on a launch
                                                                  command or the running server
    workbench probe add --host H --file PATH (--before REGEX | --line N) [--function F] --print EXPR...
                        [--once-per EXPR [--max-prints N]] [--tag TAG] [--python P] [--port N] [--package PKG]
                        [--timeout S]                             inject a debug print, once per process or once
                                                                  per distinct value of --once-per (relative PATH:
                                                                  against the engine's package root)
    workbench probe add --host H --recipe NAME [--target-arch A] [--draft-arch A] [--tag TAG] [--once-per EXPR] [...]
                                                                  a named probe on the EAGLE-3 code path
    workbench probe recipes                                       the named probes and how to read them
    workbench probe list --host H [--json]                        the probes in the box's journal and their files
    workbench probe revert --host H (--tag TAG | --file PATH | --all)   restore the files byte for byte
    workbench probe read --host H --tag TAG (--log FILE | --port N) [--json]   what a probe printed, parsed
    workbench logs FILE [--host H] [--json] [--last N] [--follow S]   accept length, throughput and load over time
                                                                  from an SGLang server log (0.4.x to 0.5.23)
    workbench measure [--host H] [--port N] [--prompts chat|code|math|FILE] [--sources ...] [--json]
                                                                  accept length from every source the server offers
    workbench source locate|show FILE[:LINE]|find NAME|map|scan [--host H] [--port N | --python P | --package PKG]
                                                                  read the engine's source on the box: where it is,
                                                                  numbered lines, definitions (ast), the EAGLE-3
                                                                  code-path map, swallowed errors on that path

Exit codes: 0 success (doctor: no error finding), 1 a failure (doctor: at least one error
finding; probe: a revert refused because someone else edited the file, an unreadable journal
entry, or a probe that has not printed yet), 2 the command itself could not run (bad arguments,
unreachable box, unknown tag or recipe, no engine found, an anchor that matches no line or several,
an expression that is not Python or would change state, a file that is not Python source).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

from workbench.cli.argtypes import positive_int, positive_seconds, tcp_port

#: Set in the environment of a runbook run by ``workbench runbook``: the driver restores the
#: box itself when the run fails or is interrupted, so the kernel must not race it at exit.
DRIVER_ENV = "EAGLE_WORKBENCH_DRIVER"


def runbooks_dir() -> Path:
    """The repository's ``runbooks/`` folder (next to the ``workbench`` package)."""
    return Path(__file__).resolve().parents[2] / "runbooks"


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
    from workbench.session.journal import restore_box

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
    from workbench.session.journal import Journal, JournalError

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
    from workbench.session.journal import JournalError, restore_box

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
    from workbench.engine.launch import LaunchCommand, LaunchCommandError

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
            from workbench.engine.locate import is_launch_argv

            servers = [s for s in box.find_servers(timeout=args.timeout) if is_launch_argv(s.argv)]
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


# -- workbench probe -----------------------------------------------------------------------------


class _ProbeExit(Exception):
    """Ends a ``workbench probe`` subcommand with ``code`` and a one-line ``message`` on stderr."""

    def __init__(self, code: int, message: str):
        self.code = code
        super().__init__(message)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _is_box_absolute(path: str) -> bool:
    return path.startswith(("/", "~"))


def _default_probe_tag(path: str, line: int, taken: set[str]) -> str:
    """``<file stem>-L<line>`` (valid per ``remote.probes.TAG_RE``), with ``-2``, ``-3``... when
    the journal already uses it. ``line``: the anchor's line in the original file's numbering
    (other probes' blocks not counted)."""
    import posixpath
    import re

    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", posixpath.splitext(posixpath.basename(path))[0]).lstrip("_.-")
    base = f"{(stem or 'probe')[:48]}-L{line}"
    tag, n = base, 2
    while tag in taken:
        tag, n = f"{base}-{n}", n + 1
    return tag


def _probe_engine(box: Any, args: argparse.Namespace):
    """``find_engine`` with the command's --python / --port / --package."""
    from workbench.engine import find_engine

    return find_engine(box, python=args.python, port=args.port, package=args.package, timeout=args.timeout)


def _probe_add(args: argparse.Namespace, box: Any) -> int:
    from remote import probes
    from remote.errors import ProbeError, RemoteFileNotFound
    from workbench.engine.recipes import RECIPES, recipe_probe
    from workbench.engine.codepath import code_path_map
    from workbench.engine import EngineNotFound

    file_opts = [name for name, value in (("--file", args.file), ("--before", args.before), ("--line", args.line),
                                          ("--function", args.function), ("--print", args.print)) if value]
    if args.recipe:
        if file_opts:
            raise _ProbeExit(2, f"--recipe sets the file, anchor and expressions itself; drop {', '.join(file_opts)}")
        if args.recipe not in RECIPES:
            raise _ProbeExit(2, f"no probe recipe {args.recipe!r} (recipes: {', '.join(RECIPES)}; "
                                "see `workbench probe recipes`)")
    else:
        if not args.file:
            raise _ProbeExit(2, "give --file PATH with --before REGEX or --line N and --print EXPR, or --recipe NAME")
        if (args.before is None) == (args.line is None):
            raise _ProbeExit(2, "give exactly one of --before REGEX or --line N")
        if args.line is not None and args.line < 1:
            raise _ProbeExit(2, f"--line must be a 1-based line number, got {args.line}")
        if not args.print:
            raise _ProbeExit(2, "give at least one --print EXPR (a Python expression evaluated at the anchor)")
        for expr in args.print:
            try:
                probes.check_expression(expr, what="--print")
            except ProbeError as exc:
                raise _ProbeExit(2, exc.message) from None
    if args.once_per is not None:
        try:
            probes.check_expression(args.once_per, what="--once-per")
        except ProbeError as exc:
            raise _ProbeExit(2, exc.message) from None
    elif args.max_prints is not None:
        raise _ProbeExit(2, "--max-prints N goes with --once-per EXPR (without it the probe prints once per process)")
    max_prints = args.max_prints if args.max_prints is not None else probes.MAX_PRINTS
    if args.tag is not None and not probes.TAG_RE.match(args.tag):
        raise _ProbeExit(2, f"--tag {args.tag!r} must be letters, digits and _.- (regex {probes.TAG_RE.pattern})")

    engine = None
    engine_note = ""
    if args.recipe or not _is_box_absolute(args.file):
        try:
            engine = _probe_engine(box, args)
        except EngineNotFound as exc:
            what = f"recipe {args.recipe}" if args.recipe else f"the relative --file {args.file}"
            raise _ProbeExit(2, f"no engine found for {what}: {_one_line(exc)}"
                                + ("" if args.recipe else "; or give the file's absolute path")) from None
    elif not args.python:
        try:
            engine = _probe_engine(box, args)
        except EngineNotFound as exc:
            engine_note = f" (engine not located: {_one_line(exc)})"
    python = args.python or (engine.python if engine is not None else box.python)

    reads = None
    if args.recipe:
        recipe = RECIPES[args.recipe]
        cmap = code_path_map(engine.source(box, timeout=args.timeout), target_arch=args.target_arch,
                             draft_arch=args.draft_arch, keys=[recipe.entry])
        spec = recipe_probe(cmap, args.recipe, tag=args.tag)
        path, before, function, exprs, tag = spec.path, spec.line, spec.function, tuple(spec.exprs), spec.tag
        once_per = args.once_per if args.once_per is not None else spec.once_per
        reads = recipe.reads
    else:
        path = engine.source(box, timeout=args.timeout).path(args.file) if engine is not None and \
            not _is_box_absolute(args.file) else box.expand_path(args.file)
        before = args.before if args.before is not None else args.line
        function, exprs, tag = args.function, tuple(args.print), args.tag
        once_per = args.once_per
    try:
        real = box.realpath(path, timeout=args.timeout)
        if not box.exists(real, timeout=args.timeout):
            raise RemoteFileNotFound("no such file", path=path, box=box.name)
    except RemoteFileNotFound:
        raise _ProbeExit(2, f"no file {path} on {box.name}") from None
    if not real.endswith(".py"):
        raise _ProbeExit(2, f"not a Python source file (a probe goes only into a file ending in .py): {real}")

    entries, problems = probes.list_journal(box, timeout=args.timeout)
    journal = {p.tag: p for p in entries}
    if tag is None:
        same = [p for p in journal.values() if p.path == real and p.anchor == before and p.function == function
                and p.exprs == exprs and p.once_per == once_per
                and (once_per is None or p.max_prints == max_prints)]
        if same:
            tag = same[0].tag
        else:
            line = probes.locate_anchor(box, real, before=before, function=function, without_probes=True,
                                        timeout=args.timeout)
            tag = _default_probe_tag(real, line, set(journal) | {q.tag for q in problems})
    existing = journal.get(tag)
    if args.recipe and existing is not None and existing.path == real and existing.exprs == exprs \
            and existing.function == function:
        before = existing.anchor  # the map's line moved down by the block already there
    probe = probes.add_probe(box, real, before=before, exprs=exprs, tag=tag, function=function,
                             once_per=once_per, max_prints=max_prints, python=python, timeout=args.timeout)
    again = existing is not None and existing.created_at == probe.created_at
    anchor_text = box.read_lines(probe.path, probe.line + probe.block_lines, probe.line + probe.block_lines,
                                 timeout=args.timeout)
    port = args.port or (engine.port if engine is not None else None)
    if args.json:
        out = {**probe.to_dict(), "already_added": again, "python": python,
               "anchor_text": anchor_text[0][1] if anchor_text else None, "recipe": args.recipe,
               "engine": engine.to_dict() if engine is not None else None}
        print(json.dumps(out, indent=2))
        return 0
    print(f"probe {probe.tag} {'is already in place' if again else 'added'} on {box.name}")
    print(f"  file:    {probe.path}:{probe.line}" + (f"  (in {probe.function})" if probe.function else ""))
    if anchor_text:
        print(f"  before:  {anchor_text[0][1].strip()}")
    print(f"  prints:  {', '.join(probe.exprs)}")
    how_often = (f"once per distinct value of {probe.once_per}, at most {probe.max_prints} lines per process"
                 if probe.once_per is not None else "once per process")
    print(f"           {how_often}, on its stderr: [probe:{probe.tag}] "
          + " ".join(f"{e}=..." for e in probe.exprs))
    if reads:
        print(f"  reading: {reads}")
    print(f"  checked: the original and the patched file compile with {python}{engine_note}")
    if probe.owner_note:
        print(f"  {probe.owner_note}")
    if engine is not None:
        print(f"  engine:  {engine.package} {engine.version or '(version unknown)'} at {engine.root}")
    print(f"  journal: {probe.journal_path} (original kept at {probe.backup_path}, sha256 "
          f"{probe.original_sha256[:16]}…)")
    host = f"--host {args.host}"
    where = f"--port {port}" if port else "--log <the server's log file>  (or --port N of the running server)"
    print("next steps:")
    print(f"  1. restart the server so it loads the patched file (the probe prints {how_often})")
    print("  2. send a request, then read what it printed:")
    print(f"       workbench probe read {host} --tag {probe.tag} {where}")
    print("  3. revert it (restores the file byte for byte):")
    print(f"       workbench probe revert {host} --tag {probe.tag}")
    return 0


def _probe_recipes(args: argparse.Namespace) -> int:
    from workbench.engine.recipes import RECIPES

    if args.json:
        print(json.dumps([{"name": r.name, "entry": r.entry, "exprs": list(r.exprs), "description": r.description,
                           "reads": r.reads} for r in RECIPES.values()], indent=2))
        return 0
    for r in RECIPES.values():
        print(f"{r.name}")
        print(f"  where:   before the code-path entry {r.entry} (found in the box's own source)")
        print(f"  shows:   {r.description}")
        print(f"  prints:  {', '.join(r.exprs)}")
        print(f"  reading: {r.reads}")
    print("add one with: workbench probe add --host H --recipe NAME [--python P | --port N] [--package PKG]")
    return 0


def _probe_list(args: argparse.Namespace, box: Any) -> int:
    import datetime

    from remote import probes

    entries, problems = probes.list_journal(box, timeout=args.timeout)
    rows = []
    for p in entries:
        status, sha = probes.probe_file_status(box, p, others=entries, timeout=args.timeout)
        created = datetime.datetime.fromtimestamp(p.created_at).astimezone().isoformat(timespec="seconds")
        rows.append((p, status, sha, created))
    if args.json:
        print(json.dumps([{**p.to_dict(), "created": created, "file_status": status,
                           "file_status_text": probes.FILE_STATUSES[status], "file_sha256": sha}
                          for p, status, sha, created in rows], indent=2))
    elif not rows:
        print(f"no probes on {box.name} (journal {probes.journal_dir(box)})")
    else:
        print(f"{len(rows)} probe(s) on {box.name} (journal {probes.journal_dir(box)}), oldest first:")
        for p, status, sha, created in rows:
            print(f"  {p.tag}  [{p.state}]  {p.path}:{p.line}" + (f"  (in {p.function})" if p.function else ""))
            print(f"      prints: {', '.join(p.exprs)}"
                  + (f"  (once per {p.once_per}, at most {p.max_prints} lines)" if p.once_per is not None else ""))
            note = ""
            if p.state == "pending":
                note = f"; an add was interrupted: `workbench probe revert --tag {p.tag}` cleans it up"
            print(f"      added {created}; file: {probes.FILE_STATUSES[status]}{note}")
    if problems:
        _probe_journal_problems("workbench probe list", problems)
        return 1
    return 0


def _probe_journal_problems(prog: str, problems: Sequence[Any]) -> None:
    """One line on stderr per unreadable journal entry (``remote.probes.JournalProblem``)."""
    print(f"{prog}: {len(problems)} unreadable journal entr{'y' if len(problems) == 1 else 'ies'} (problems):",
          file=sys.stderr)
    for problem in problems:
        print(f"  {problem.describe()}", file=sys.stderr)


def _probe_revert(args: argparse.Namespace, box: Any) -> int:
    import posixpath

    from remote import probes
    from remote.errors import ProbeConflict, ProbeError

    chosen = [name for name, value in (("--tag", args.tag), ("--file", args.file), ("--all", args.all)) if value]
    if len(chosen) != 1:
        raise _ProbeExit(2, "give exactly one of --tag TAG, --file PATH or --all")
    entries, problems = probes.list_journal(box, timeout=args.timeout)
    if args.tag:
        bad = [q for q in problems if q.tag == args.tag]
        if bad:
            raise _ProbeExit(1, f"cannot revert {args.tag}: {bad[0].describe()}")
        if args.tag not in {p.tag for p in entries}:
            known = ", ".join(p.tag for p in entries) or "none"
            raise _ProbeExit(2, f"no probe {args.tag!r} in the journal on {box.name} (probes: {known})")
        targets = [p for p in entries if p.tag == args.tag]
    elif args.file:
        if _is_box_absolute(args.file):
            real = box.realpath(box.expand_path(args.file), timeout=args.timeout)
            targets = [p for p in entries if p.path in (real, box.expand_path(args.file))]
        else:
            rel = posixpath.normpath(args.file)
            targets = [p for p in entries if p.path.endswith("/" + rel)]
            files = sorted({p.path for p in targets})
            if len(files) > 1:
                raise _ProbeExit(2, f"--file {args.file} matches probes on {len(files)} files ({', '.join(files)}); "
                                    "give the absolute path")
        if not targets:
            known = ", ".join(sorted({p.path for p in entries})) or "none"
            raise _ProbeExit(2, f"no probe on {args.file} in the journal on {box.name} (probed files: {known})")
        targets = list(reversed(targets))  # newest first
    else:
        targets = list(reversed(entries))
        if not targets and not problems:
            print(f"no probes to revert on {box.name}")
            return 0
    failures = []
    for p in targets:
        try:
            entry = probes.revert_probe(box, p.tag, timeout=args.timeout)
        except ProbeConflict as exc:
            failures.append(exc)
            print(f"workbench probe revert: NOT reverted {p.tag}: {_one_line(exc)}", file=sys.stderr)
            continue
        except ProbeError as exc:
            failures.append(exc)
            print(f"workbench probe revert: NOT reverted {p.tag}: {_one_line(exc)}", file=sys.stderr)
            continue
        sha = box.sha256(entry.path, timeout=args.timeout)
        same = "matches the original's" if sha == entry.original_sha256 else \
            f"DOES NOT match the original's {entry.original_sha256[:16]}…"
        what = "cleaned up an interrupted add of" if entry.state == "pending" else "reverted"
        print(f"{what} {entry.tag}: {entry.path} restored byte for byte (sha256 {sha[:16]}… {same})")
        if entry.owner_note:
            print(f"  {entry.owner_note}")
    if problems and (args.all or args.file):
        _probe_journal_problems("workbench probe revert", problems)
        if args.all:
            return 1
    return 1 if failures else 0


def _probe_read(args: argparse.Namespace, box: Any) -> int:
    from remote import probes
    from remote.errors import RemoteFileNotFound, RemoteIsADirectory, RemotePermissionError
    from workbench.engine import running_servers

    if not probes.TAG_RE.match(args.tag):
        raise _ProbeExit(2, f"--tag {args.tag!r} is not a probe tag (regex {probes.TAG_RE.pattern})")
    if (args.log is None) == (args.port is None):
        raise _ProbeExit(2, "give exactly one of --log FILE or --port N (the running server's port)")
    if args.log is not None:
        log = box.expand_path(args.log)
    else:
        servers = running_servers(box, port=args.port, timeout=args.timeout)
        if not servers:
            raise _ProbeExit(2, f"no server runs on port {args.port} on {box.name}; pass --log FILE")
        if not servers[0].log_path:
            raise _ProbeExit(2, f"the server on port {args.port} (pid {servers[0].pid}) does not write its stderr "
                                "to a file; pass --log FILE")
        log = servers[0].log_path
    known = {p.tag: p for p in probes.list_probes(box, timeout=args.timeout)}
    probe = known.get(args.tag)
    try:
        readings = probes.read_probe_log(box, log, probe or args.tag, timeout=args.timeout)
    except (RemoteFileNotFound, RemoteIsADirectory, RemotePermissionError) as exc:
        raise _ProbeExit(2, f"cannot read the log: {_one_line(exc)}") from None
    if args.json:
        print(json.dumps({"tag": args.tag, "log": log, "readings": [r.to_dict() for r in readings]}, indent=2))
    else:
        print(f"probe {args.tag} in {log}: {len(readings)} line(s)")
        for r in readings:
            print(f"  line {r.line_number}:")
            if r.error:
                print(f"    the probe itself failed: {r.error}")
                continue
            for expr, value in r.values.items():
                raw = r.raw[expr]
                shown = raw if isinstance(value, str) and value == raw else repr(value)
                print(f"    {expr} = {shown}" + ("   (raised)" if expr in r.errors else ""))
    if not readings:
        why = (f"probe {args.tag} is in the journal: restart the server so it loads the patched file, "
               "then send a request" if probe is not None else
               f"and no probe {args.tag!r} is in the journal on {box.name}: was it added?")
        print(f"workbench probe read: no [probe:{args.tag}] line in {log} yet; {why}", file=sys.stderr)
        return 1
    return 0


def _cmd_probe(args: argparse.Namespace) -> int:
    """``workbench probe add|recipes|list|revert|read``: exit 0 ok, 1 a failure (a revert refused,
    nothing printed yet, a conflicting journal), 2 the command could not run."""
    from remote import connect
    from remote.errors import ProbeCompileError, ProbeConflict, ProbeError, RemoteError, RemoteFileNotFound
    from workbench.engine import EngineNotFound, SourceLookupError

    prog = f"workbench probe {args.probe_command}"
    if args.probe_command == "recipes":
        return _probe_recipes(args)
    try:
        with connect(args.host) as box:
            return args.probe_func(args, box)
    except _ProbeExit as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.code
    except ProbeCompileError as exc:
        import re

        output = exc.output or ""
        last = [line.strip() for line in output.strip().splitlines() if line.strip()]
        where = re.findall(r'File "[^"]*", line (\d+)', output)
        head = exc.message.split("\n--- compiler output ---")[0]
        text = "the original" if exc.of_original else "the patched text"
        written = "" if "nothing was written" in head else "; nothing was written"
        print(f"{prog}: {_one_line(head)}: {last[-1] if last else 'no compiler output'}"
              + (f" (at line {where[-1]} of {text})" if where else "") + written, file=sys.stderr)
        return 2
    except ProbeConflict as exc:
        print(f"{prog}: {_one_line(exc)}", file=sys.stderr)
        return 1
    except (ProbeError, EngineNotFound, SourceLookupError, RemoteFileNotFound) as exc:
        print(f"{prog}: {_one_line(exc)}", file=sys.stderr)
        return 2
    except RemoteError as exc:
        print(f"{prog}: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 2


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
    p.add_argument("--timeout", type=positive_seconds, default=30.0,
                   help="seconds for each call to the box (default 30)")
    p.set_defaults(func=_cmd_doctor)

    p = sub.add_parser("probe", help="one-shot debug prints in the engine's source: add, list, revert, read",
                       description="Debug prints in the engine's source on a box: add one (once per process, or "
                                   "once per distinct value of --once-per), list the journal, read what it printed "
                                   "from the server's log, revert the files byte for byte.")
    probe_sub = p.add_subparsers(dest="probe_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--host", default="local", help="the box: local, an ~/.ssh/config alias, user@host[:port]")
    common.add_argument("--timeout", type=positive_seconds, default=60.0,
                        help="seconds for each call to the box (default 60)")
    engine_opts = argparse.ArgumentParser(add_help=False)
    engine_opts.add_argument("--python", help="the interpreter that runs the server, on the box (finds the engine "
                                              "package; compiles the patched file)")
    engine_opts.add_argument("--port", type=tcp_port,
                             help="the running server's port (its interpreter finds the engine)")
    engine_opts.add_argument("--package", help="the engine package (default: sglang, or the running server's)")

    q = probe_sub.add_parser("add", parents=[common, engine_opts], help="inject a debug print before a line",
                             description="Inject a debug print before a line of a Python file of the engine: once "
                                         "per process, or once per distinct value of --once-per.")
    q.add_argument("--file", help="the Python file on the box: absolute, or relative to the engine package root "
                                  "(srt/models/llama_eagle3.py)")
    q.add_argument("--before", help="regex matching the one line the probe goes before")
    q.add_argument("--line", type=int, help="1-based line number the probe goes before")
    q.add_argument("--function", help="restrict the anchor to this function (func or Class.method)")
    q.add_argument("--print", action="append", metavar="EXPR",
                   help="a Python expression to print (repeatable); it must only read: no :=, await, yield or "
                        "in-place method call such as x.zero_()")
    q.add_argument("--once-per", metavar="EXPR",
                   help="print once per distinct value of EXPR in each process (e.g. hidden_states.shape[-1]) "
                        "instead of once per process")
    q.add_argument("--max-prints", type=positive_int, metavar="N",
                   help="with --once-per: at most N lines per process (default 8)")
    q.add_argument("--tag", help="the probe's name (default: the file stem and line, or the recipe name)")
    q.add_argument("--recipe", help="a named probe on the EAGLE-3 code path (see `workbench probe recipes`)")
    q.add_argument("--target-arch", default="LlamaForCausalLM", help="with --recipe: the target's architecture")
    q.add_argument("--draft-arch", default="LlamaForCausalLMEagle3", help="with --recipe: the draft's architecture")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_cmd_probe, probe_func=_probe_add)

    q = probe_sub.add_parser("recipes", help="the named probes on the EAGLE-3 code path")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_cmd_probe, probe_func=None)

    q = probe_sub.add_parser("list", parents=[common], help="the probes in the box's journal and their files' state")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_cmd_probe, probe_func=_probe_list)

    q = probe_sub.add_parser("revert", parents=[common], help="remove probes, restoring the files byte for byte")
    q.add_argument("--tag", help="the probe to revert")
    q.add_argument("--file", help="revert every probe on this file, newest first (absolute, or the end of the path)")
    q.add_argument("--all", action="store_true", help="revert every probe on the box, newest first")
    q.set_defaults(func=_cmd_probe, probe_func=_probe_revert)

    q = probe_sub.add_parser("read", parents=[common], help="what a probe printed into the server's log, parsed")
    q.add_argument("--tag", required=True)
    q.add_argument("--log", help="the server's log file on the box")
    q.add_argument("--port", type=tcp_port, help="the running server's port (its log is found from its stderr)")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=_cmd_probe, probe_func=_probe_read)

    from workbench.cli.logs import add_logs_parser
    from workbench.cli.measure import add_measure_parser
    from workbench.cli.source import add_source_parser

    add_source_parser(sub)
    add_logs_parser(sub)
    add_measure_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``workbench`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # the output went to a pipe that closed (`| head`): what was done is done
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1

