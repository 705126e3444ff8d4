"""``workbench probe``: one-shot debug prints in the engine's source on a box.

    workbench probe add --host H --file PATH (--before REGEX | --line N) [--function F] --print EXPR...
                        [--once-per EXPR [--max-prints N]] [--tag TAG] [--python P] [--port N] [--package PKG]
                        [--timeout S]                             inject a debug print, once per process or once
                                                                  per distinct value of --once-per (relative PATH:
                                                                  against the engine's package root)
    workbench probe add --host H --recipe NAME [--target-arch A] [--draft-arch A] [--tag TAG] [--once-per EXPR] [...]
                                                                  a named probe on the EAGLE-3 code path
    workbench probe recipes [--json]                              the named probes and how to read them
    workbench probe list --host H [--json]                        the probes in the box's journal and their files
    workbench probe revert --host H (--tag TAG | --file PATH | --all)   restore the files byte for byte
    workbench probe read --host H --tag TAG (--log FILE | --port N) [--json]   what a probe printed, parsed

A probe is a marker-delimited block (:mod:`remote.probes`) put before one line of a Python file of
the engine, journalled on the box with the original's bytes; ``revert`` puts the file back byte
for byte, unless someone else edited it since (then nothing is changed, and the message says how
to go on). Every box call takes ``--timeout S`` (default 60).

Exit codes: 0 done, 1 a failure (a revert refused because someone else edited the file, an
unreadable journal entry, a probe that has not printed yet), 2 the command could not run (an
unreachable box, an unknown tag or recipe, no engine found, an anchor that matches no line or
several, an expression that is not Python or would change state, a file that is not Python source).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from workbench.cli.argtypes import positive_int
from workbench.cli.common import (
    CliError, ExitCode, add_box_options, add_json_option, add_port_option, one_line, open_box, reworded,
    set_command,
)

__all__ = ["add_parser"]


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


def _probe_add(args: argparse.Namespace, box: Any) -> ExitCode:
    from remote import probes
    from remote.errors import ProbeError, RemoteFileNotFound
    from workbench.engine.recipes import RECIPES, recipe_probe
    from workbench.engine.codepath import code_path_map
    from workbench.engine import EngineNotFound

    file_opts = [name for name, value in (("--file", args.file), ("--before", args.before), ("--line", args.line),
                                          ("--function", args.function), ("--print", args.print)) if value]
    if args.recipe:
        if file_opts:
            raise CliError(f"--recipe sets the file, anchor and expressions itself; drop {', '.join(file_opts)}")
        if args.recipe not in RECIPES:
            raise CliError(f"no probe recipe {args.recipe!r} (recipes: {', '.join(RECIPES)}; "
                           "see `workbench probe recipes`)")
    else:
        if not args.file:
            raise CliError("give --file PATH with --before REGEX or --line N and --print EXPR, or --recipe NAME")
        if (args.before is None) == (args.line is None):
            raise CliError("give exactly one of --before REGEX or --line N")
        if args.line is not None and args.line < 1:
            raise CliError(f"--line must be a 1-based line number, got {args.line}")
        if not args.print:
            raise CliError("give at least one --print EXPR (a Python expression evaluated at the anchor)")
        for expr in args.print:
            try:
                probes.check_expression(expr, what="--print")
            except ProbeError as exc:
                raise CliError(exc.message) from None
    if args.once_per is not None:
        try:
            probes.check_expression(args.once_per, what="--once-per")
        except ProbeError as exc:
            raise CliError(exc.message) from None
    elif args.max_prints is not None:
        raise CliError("--max-prints N goes with --once-per EXPR (without it the probe prints once per process)")
    max_prints = args.max_prints if args.max_prints is not None else probes.MAX_PRINTS
    if args.tag is not None and not probes.TAG_RE.match(args.tag):
        raise CliError(f"--tag {args.tag!r} must be letters, digits and _.- (regex {probes.TAG_RE.pattern})")

    engine = None
    engine_note = ""
    if args.recipe or not _is_box_absolute(args.file):
        try:
            engine = _probe_engine(box, args)
        except EngineNotFound as exc:
            what = f"recipe {args.recipe}" if args.recipe else f"the relative --file {args.file}"
            raise CliError(f"no engine found for {what}: {one_line(exc)}"
                           + ("" if args.recipe else "; or give the file's absolute path")) from None
    elif not args.python:
        try:
            engine = _probe_engine(box, args)
        except EngineNotFound as exc:
            engine_note = f" (engine not located: {one_line(exc)})"
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
        raise CliError(f"no file {path} on {box.name}") from None
    if not real.endswith(".py"):
        raise CliError(f"not a Python source file (a probe goes only into a file ending in .py): {real}")

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
        return ExitCode.OK
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
    return ExitCode.OK


def _probe_recipes(args: argparse.Namespace) -> ExitCode:
    from workbench.engine.recipes import RECIPES

    if args.json:
        print(json.dumps([{"name": r.name, "entry": r.entry, "exprs": list(r.exprs), "description": r.description,
                           "reads": r.reads} for r in RECIPES.values()], indent=2))
        return ExitCode.OK
    for r in RECIPES.values():
        print(f"{r.name}")
        print(f"  where:   before the code-path entry {r.entry} (found in the box's own source)")
        print(f"  shows:   {r.description}")
        print(f"  prints:  {', '.join(r.exprs)}")
        print(f"  reading: {r.reads}")
    print("add one with: workbench probe add --host H --recipe NAME [--python P | --port N] [--package PKG]")
    return ExitCode.OK


def _probe_list(args: argparse.Namespace, box: Any) -> ExitCode:
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
        _probe_journal_problems(args.prog, problems)
        return ExitCode.FAILURE
    return ExitCode.OK


def _probe_journal_problems(prog: str, problems: Sequence[Any]) -> None:
    """One line on stderr per unreadable journal entry (``remote.probes.JournalProblem``)."""
    print(f"{prog}: {len(problems)} unreadable journal entr{'y' if len(problems) == 1 else 'ies'} (problems):",
          file=sys.stderr)
    for problem in problems:
        print(f"  {problem.describe()}", file=sys.stderr)


def _probe_revert(args: argparse.Namespace, box: Any) -> ExitCode:
    import posixpath

    from remote import probes
    from remote.errors import ProbeError

    chosen = [name for name, value in (("--tag", args.tag), ("--file", args.file), ("--all", args.all)) if value]
    if len(chosen) != 1:
        raise CliError("give exactly one of --tag TAG, --file PATH or --all")
    entries, problems = probes.list_journal(box, timeout=args.timeout)
    if args.tag:
        bad = [q for q in problems if q.tag == args.tag]
        if bad:
            raise CliError(f"cannot revert {args.tag}: {bad[0].describe()}", ExitCode.FAILURE)
        if args.tag not in {p.tag for p in entries}:
            known = ", ".join(p.tag for p in entries) or "none"
            raise CliError(f"no probe {args.tag!r} in the journal on {box.name} (probes: {known})")
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
                raise CliError(f"--file {args.file} matches probes on {len(files)} files ({', '.join(files)}); "
                               "give the absolute path")
        if not targets:
            known = ", ".join(sorted({p.path for p in entries})) or "none"
            raise CliError(f"no probe on {args.file} in the journal on {box.name} (probed files: {known})")
        targets = list(reversed(targets))  # newest first
    else:
        targets = list(reversed(entries))
        if not targets and not problems:
            print(f"no probes to revert on {box.name}")
            return ExitCode.OK
    failures = []
    for p in targets:
        try:
            entry = probes.revert_probe(box, p.tag, timeout=args.timeout)
        except ProbeError as exc:  # ProbeConflict (edited by someone else) among them: reported, the rest go on
            failures.append(exc)
            print(f"{args.prog}: NOT reverted {p.tag}: {one_line(exc)}", file=sys.stderr)
            continue
        sha = box.sha256(entry.path, timeout=args.timeout)
        same = "matches the original's" if sha == entry.original_sha256 else \
            f"DOES NOT match the original's {entry.original_sha256[:16]}…"
        what = "cleaned up an interrupted add of" if entry.state == "pending" else "reverted"
        print(f"{what} {entry.tag}: {entry.path} restored byte for byte (sha256 {sha[:16]}… {same})")
        if entry.owner_note:
            print(f"  {entry.owner_note}")
    if problems and (args.all or args.file):
        _probe_journal_problems(args.prog, problems)
        if args.all:
            return ExitCode.FAILURE
    return ExitCode.FAILURE if failures else ExitCode.OK


def _probe_read(args: argparse.Namespace, box: Any) -> ExitCode:
    from remote import probes
    from remote.errors import RemoteFileNotFound, RemoteIsADirectory, RemotePermissionError
    from workbench.engine import running_servers

    if not probes.TAG_RE.match(args.tag):
        raise CliError(f"--tag {args.tag!r} is not a probe tag (regex {probes.TAG_RE.pattern})")
    if (args.log is None) == (args.port is None):
        raise CliError("give exactly one of --log FILE or --port N (the running server's port)")
    if args.log is not None:
        log = box.expand_path(args.log)
    else:
        servers = running_servers(box, port=args.port, timeout=args.timeout)
        if not servers:
            raise CliError(f"no server runs on port {args.port} on {box.name}; pass --log FILE")
        if not servers[0].log_path:
            raise CliError(f"the server on port {args.port} (pid {servers[0].pid}) does not write its stderr "
                           "to a file; pass --log FILE")
        log = servers[0].log_path
    known = {p.tag: p for p in probes.list_probes(box, timeout=args.timeout)}
    probe = known.get(args.tag)
    try:
        readings = probes.read_probe_log(box, log, probe or args.tag, timeout=args.timeout)
    except (RemoteFileNotFound, RemoteIsADirectory, RemotePermissionError) as exc:
        raise CliError(f"cannot read the log: {one_line(exc)}") from None
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
        raise CliError(f"no [probe:{args.tag}] line in {log} yet; {why}", ExitCode.FAILURE)
    return ExitCode.OK




def _compile_error_message(exc: Any) -> str:
    """A ``remote.errors.ProbeCompileError`` in one line: what did not compile, the compiler's last
    line and where (``at line N of the original`` / ``of the patched text``), and that nothing
    was written."""
    import re

    output = exc.output or ""
    last = [line.strip() for line in output.strip().splitlines() if line.strip()]
    where = re.findall(r'File "[^"]*", line (\d+)', output)
    head = exc.message.split("\n--- compiler output ---")[0]
    text = "the original" if exc.of_original else "the patched text"
    written = "" if "nothing was written" in head else "; nothing was written"
    return (f"{one_line(head)}: {last[-1] if last else 'no compiler output'}"
            + (f" (at line {where[-1]} of {text})" if where else "") + written)


def _run_on_box(args: argparse.Namespace) -> ExitCode:
    """``workbench probe add|list|revert|read``: ``args.probe_func(args, box)`` on the ``--host``
    box. The box layer's and the engine lookup's errors are worded in one line (a
    ``RemoteError`` outside the probe family with its class name, a compile error with the
    compiler's line); their exit codes are :func:`~workbench.cli.common.exit_code_for`'s
    (``ProbeConflict`` 1, the rest 2)."""
    from remote.errors import ProbeCompileError, ProbeError, RemoteError, RemoteFileNotFound
    from workbench.engine import EngineNotFound, SourceLookupError

    try:
        with open_box(args) as box:
            return args.probe_func(args, box)
    except ProbeCompileError as exc:
        raise reworded(exc, _compile_error_message(exc)) from exc
    except (ProbeError, EngineNotFound, SourceLookupError, RemoteFileNotFound) as exc:
        raise reworded(exc, one_line(exc)) from exc
    except RemoteError as exc:
        raise reworded(exc, f"{type(exc).__name__}: {one_line(exc)}") from exc


def add_parser(sub: Any) -> None:
    """Register ``workbench probe`` (add / recipes / list / revert / read) on the CLI's subparsers
    (``argparse`` ``add_subparsers()``)."""
    p = sub.add_parser("probe", help="one-shot debug prints in the engine's source: add, list, revert, read",
                       description="Debug prints in the engine's source on a box: add one (once per process, or "
                                   "once per distinct value of --once-per), list the journal, read what it printed "
                                   "from the server's log, revert the files byte for byte.")
    probe_sub = p.add_subparsers(dest="probe_command", required=True)

    def on_box(name: str, func: Any, **kwargs: Any) -> argparse.ArgumentParser:
        q = probe_sub.add_parser(name, **kwargs)
        add_box_options(q, timeout=60.0)
        q.set_defaults(probe_func=func)
        set_command(q, _run_on_box)
        return q

    q = on_box("add", _probe_add, help="inject a debug print before a line",
               description="Inject a debug print before a line of a Python file of the engine: once "
                           "per process, or once per distinct value of --once-per.")
    q.add_argument("--python", help="the interpreter that runs the server, on the box (finds the engine "
                                    "package; compiles the patched file)")
    add_port_option(q, "the running server's port (its interpreter finds the engine)")
    q.add_argument("--package", help="the engine package (default: sglang, or the running server's)")
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
    add_json_option(q, "the probe added")

    q = probe_sub.add_parser("recipes", help="the named probes on the EAGLE-3 code path")
    add_json_option(q, "the recipes")
    set_command(q, _probe_recipes)

    q = on_box("list", _probe_list, help="the probes in the box's journal and their files' state")
    add_json_option(q, "the journal")

    q = on_box("revert", _probe_revert, help="remove probes, restoring the files byte for byte")
    q.add_argument("--tag", help="the probe to revert")
    q.add_argument("--file", help="revert every probe on this file, newest first (absolute, or the end of the path)")
    q.add_argument("--all", action="store_true", help="revert every probe on the box, newest first")

    q = on_box("read", _probe_read, help="what a probe printed into the server's log, parsed")
    q.add_argument("--tag", required=True)
    q.add_argument("--log", help="the server's log file on the box")
    add_port_option(q, "the running server's port (its log is found from its stderr)")
    add_json_option(q, "the readings")
