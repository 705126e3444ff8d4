"""``workbench probe``: one-shot debug prints in the engine's source on a box.

    workbench probe add --host H --file PATH (--before REGEX | --line N) [--function F] --print EXPR...
                        [--once-per EXPR [--max-prints N]] [--when EXPR] [--tag TAG] [--python P] [--port N]
                        [--package PKG] [--timeout S]             inject a debug print, once per process or once
                                                                  per distinct value of --once-per, only when
                                                                  --when holds (relative PATH: against the
                                                                  engine's package root)
    workbench probe add --host H --recipe NAME [--target-arch A] [--draft-arch A] [--tag TAG] [--once-per EXPR] [...]
                                                                  a named probe (or set of probes) on the EAGLE-3
                                                                  code path
    workbench probe recipes [--engine sglang|vllm] [--json]       the named probes and how to read them (SGLang's
                                                                  by default)
    workbench probe list --host H [--json]                        the probes in the box's journal and their files
    workbench probe revert --host H (--tag TAG | --file PATH | --all)   restore the files byte for byte
    workbench probe read --host H (--tag TAG | --recipe NAME) (--port N [--log FILE] | --log FILE [--pgid G]) [--json]
                                                                  what a probe printed, parsed: with --port only
                                                                  the lines of the server running on N

A probe is a marker-delimited block (:mod:`remote.probes`) put before one line of a Python file of
the engine, journalled on the box with the original's bytes; ``revert`` puts the file back byte
for byte, unless someone else edited it since (then nothing is changed, and the message says how
to go on). Every box call takes ``--timeout S`` (default 60).

On a vLLM box (``--package vllm``, ``--python`` of vLLM's interpreter, or ``--port`` of a running
vLLM server) the recipes are vLLM's (:data:`workbench.engine.recipes.VLLM_RECIPES`: the same names,
anchored on vLLM's code path, :mod:`workbench.engine.codepath_vllm`); ``--draft-arch`` is the
draft config's architecture, ``--method`` the ``--speculative-config`` method (default: the running
server's, else eagle3).

``add`` and ``revert`` hold the box's run lock while they run (:mod:`workbench.session.runlock`,
the one the runbooks take): while a runbook uses the box they change nothing and exit 2, naming
the run that holds it (run id, pid, host, runbook, since when); ``list``, ``read`` and ``recipes``
only read and take no lock.

Every probe line names the process group that printed it (``[probe:TAG pgid=G pid=P]``): a
launched server is its own group and its worker processes inherit it, so ``read --port N`` shows
only what the server running now printed, and says so when the log holds the tag only from an
earlier launch (exit 1).

Exit codes: 0 done, 1 a failure (a revert refused because someone else edited the file, an
unreadable journal entry, a probe that has not printed yet, or not from the server running now,
a recipe whose required probes have not all printed), 2 the command could not run (an
unreachable box, another run holding the box (add, revert), an unknown tag or recipe, no engine
found, an anchor that matches no line or several, an expression that is not Python or would change
state, a file that is not Python source).
"""

from __future__ import annotations

import argparse
import json
import posixpath
import sys
from typing import Any, Optional, Sequence

from workbench.cli.argtypes import positive_int
from workbench.cli.common import (
    CliError, ExitCode, add_box_options, add_json_option, add_port_option, one_line, open_box, reworded,
    set_command,
)

__all__ = ["add_parser"]


def _is_box_absolute(path: str) -> bool:
    return path.startswith(("/", "~"))


def _default_probe_tag(path: str, line: int, taken: set[str]) -> str:
    """``remote.probes.default_tag`` (kept under this name for the CLI)."""
    from remote.probes import default_tag

    return default_tag(path, line, taken)


def _probe_engine(box: Any, args: argparse.Namespace):
    """``find_engine`` with the command's --python / --port / --package."""
    from workbench.engine import find_engine

    return find_engine(box, python=args.python, port=args.port, package=args.package, timeout=args.timeout)


def _probe_add(args: argparse.Namespace, box: Any) -> ExitCode:
    from remote import probes
    from remote.errors import ProbeError, RemoteFileNotFound
    from workbench.engine.recipes import RECIPES, VLLM_RECIPES
    from workbench.engine import EngineNotFound

    file_opts = [name for name, value in (("--file", args.file), ("--before", args.before), ("--line", args.line),
                                          ("--function", args.function), ("--print", args.print)) if value]
    if args.recipe:
        if file_opts:
            raise CliError(f"--recipe sets the file, anchor and expressions itself; drop {', '.join(file_opts)}")
        if args.recipe not in RECIPES and args.recipe not in VLLM_RECIPES:
            raise CliError(f"no probe recipe {args.recipe!r} (recipes: {', '.join(dict.fromkeys([*RECIPES, *VLLM_RECIPES]))}; "
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
    for flag, expr in (("--once-per", args.once_per), ("--when", args.when)):
        if expr is not None:
            try:
                probes.check_expression(expr, what=flag)
            except ProbeError as exc:
                raise CliError(exc.message) from None
    if args.once_per is None and args.max_prints is not None and not args.recipe:
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

    if args.recipe:
        return _probe_add_recipe(args, box, engine, python, engine_note)
    path = engine.source(box, timeout=args.timeout).path(args.file) if engine is not None and \
        not _is_box_absolute(args.file) else box.expand_path(args.file)
    before = args.before if args.before is not None else args.line
    function, exprs, tag = args.function, tuple(args.print), args.tag
    once_per, when = args.once_per, args.when
    # Relative or absolute, the resolved file (every symlink followed, on the box) must lie inside the
    # engine package: anything else is refused (ProbePathOutside, exit 2), so the engine is needed.
    around = engine
    if around is None:  # an absolute --file: locate the engine for this check
        try:
            around = _probe_engine(box, args)
        except EngineNotFound as exc:
            raise CliError(f"no engine found to check that --file {path} lies inside it: {one_line(exc)}; a probe "
                           "only patches files of the engine package") from None
    root = around.root
    try:
        real = probes.resolve_probe_path(box, path, root, timeout=args.timeout)
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
                and p.exprs == exprs and p.once_per == once_per and p.when == when
                and (once_per is None or p.max_prints == max_prints)]
        if same:
            tag = same[0].tag
        else:
            line = probes.locate_anchor(box, real, before=before, function=function, without_probes=True,
                                        timeout=args.timeout)
            tag = _default_probe_tag(real, line, set(journal) | {q.tag for q in problems})
    existing = journal.get(tag)
    probe = probes.add_probe(box, real, before=before, exprs=exprs, tag=tag, function=function,
                             once_per=once_per, max_prints=max_prints, when=when, python=python,
                             root=root, timeout=args.timeout)
    again = existing is not None and existing.created_at == probe.created_at
    return _report_added(args, box, [(probe, again)], engine, python, engine_note, None)


def _probe_add_recipe(args: argparse.Namespace, box: Any, engine: Any, python: str, engine_note: str) -> ExitCode:
    """``probe add --recipe NAME``: every probe of the recipe, all or none
    (:func:`workbench.engine.recipes.add_recipes`), anchored on the code-path map of ``engine``."""
    from remote import probes
    from workbench.engine.codepath import code_path_map, server_worker_inputs
    from workbench.engine.recipes import add_recipes, recipes_for

    table = recipes_for(getattr(engine, "engine", "sglang"))
    if args.recipe not in table:
        raise CliError(f"no probe recipe {args.recipe!r} on {engine.engine} (its recipes: {', '.join(table)}; see "
                       "`workbench probe recipes`)")
    recipe = table[args.recipe]
    env, launch_args = server_worker_inputs(box, engine, timeout=args.timeout)  # which EAGLE worker / model runner
    if getattr(engine, "engine", "sglang") == "vllm":
        from workbench.engine.codepath_vllm import vllm_code_path_map

        keys = list(recipe.entries) + [k + ".v2" for k in recipe.entries]
        cmap = vllm_code_path_map(engine.source(box, timeout=args.timeout), target_arch=args.target_arch,
                                  draft_arch=args.draft_arch, method=args.method or _vllm_method(engine) or "eagle3",
                                  env=env, keys=keys)
    else:
        cmap = code_path_map(engine.source(box, timeout=args.timeout), target_arch=args.target_arch,
                             draft_arch=args.draft_arch, keys=list(recipe.entries), env=env, launch_args=launch_args)
    overrides = {k: v for k, v in (("once_per", args.once_per), ("when", args.when),
                                   ("max_prints", args.max_prints)) if v is not None}
    before = {p.tag: p for p in probes.list_probes(box, timeout=args.timeout)}
    added = add_recipes(box, cmap, [args.recipe], python=python, timeout=args.timeout, tag=args.tag,
                        overrides=overrides)
    rows = [(p, p.tag in before and before[p.tag].created_at == p.created_at) for p in added]
    return _report_added(args, box, rows, engine, python, engine_note, recipe)


def _vllm_method(engine: Any) -> Optional[str]:
    """The ``--speculative-config`` method of the server ``engine`` was located from (its command
    line), lower-cased; ``None`` when unknown (no server, or a command the parser does not read)."""
    from workbench.engine.launch import LaunchCommand
    from workbench.errors import LaunchCommandError

    if not getattr(engine, "launch", None):
        return None
    try:
        method = getattr(LaunchCommand.parse(engine.launch), "speculative_method", None)
    except LaunchCommandError:
        return None
    return method.lower() if isinstance(method, str) else None


def _how_often(probe: Any) -> str:
    how = (f"once per distinct value of {probe.once_per}, at most {probe.max_prints} lines per process"
           if probe.once_per is not None else "once per process")
    return how + (f", only when {probe.when}" if probe.when is not None else "")


def _report_added(args: argparse.Namespace, box: Any, rows: Sequence[tuple[Any, bool]], engine: Any, python: str,
                  engine_note: str, recipe: Any) -> ExitCode:
    """Print what ``probe add`` did: one block per probe (``rows``: ``(probe, already in place)``),
    then the next steps; with ``--json`` the main probe's record, its recipe's probes under
    ``recipe_probes``."""
    records = []
    for probe, again in rows:
        anchor = box.read_lines(probe.path, probe.line + probe.block_lines, probe.line + probe.block_lines,
                                timeout=args.timeout)
        records.append((probe, again, anchor[0][1] if anchor else None))
    port = args.port or (engine.port if engine is not None else None)
    if args.json:
        def record(probe: Any, again: bool, anchor_text: Any) -> dict:
            return {**probe.to_dict(), "already_added": again, "python": python, "anchor_text": anchor_text,
                    "recipe": recipe.name if recipe is not None else None,
                    "engine": engine.to_dict() if engine is not None else None}

        out = record(*records[0])
        if recipe is not None:
            out["recipe_probes"] = [record(*r) for r in records]
        print(json.dumps(out, indent=2))
        return ExitCode.OK
    if recipe is not None and len(records) > 1:
        print(f"recipe {recipe.name}: {len(records)} probes on {box.name}; {recipe.description}")
    roles = {p.suffix: p.role for p in recipe.probes} if recipe is not None else {}
    for probe, again, anchor_text in records:
        print(f"probe {probe.tag} {'is already in place' if again else 'added'} on {box.name}")
        role = next((r for s, r in roles.items() if s and probe.tag.endswith(s)), roles.get(""))
        if role:
            print(f"  shows:   {role}")
        print(f"  file:    {probe.path}:{probe.line}" + (f"  (in {probe.function})" if probe.function else ""))
        if anchor_text:
            print(f"  before:  {anchor_text.strip()}")
        print(f"  prints:  {', '.join(probe.exprs)}")
        print(f"           {_how_often(probe)}, on its stderr: [probe:{probe.tag} pgid=G pid=P] "
              + " ".join(f"{e}=..." for e in probe.exprs))
        if probe.owner_note:
            print(f"  {probe.owner_note}")
        if getattr(probe, "bytecode_note", None):
            print(f"  bytecode: {probe.bytecode_note}")
        print(f"  journal: {probe.journal_path} (original kept at {probe.backup_path}, sha256 "
              f"{probe.original_sha256[:16]}…)")
    if recipe is not None:
        print(f"  reading: {recipe.reads}")
        if recipe.limits:
            print(f"  limits:  {recipe.limits}")
    print(f"  checked: the original and the patched file compile with {python}{engine_note}")
    if engine is not None:
        print(f"  engine:  {engine.package} {engine.version or '(version unknown)'} at {engine.root}")
    host = f"--host {args.host}"
    where = f"--port {port}" if port else "--log <the server's log file>  (or --port N of the running server)"
    what = f"--recipe {recipe.name}" if recipe is not None and len(records) > 1 else f"--tag {records[0][0].tag}"
    print("next steps:")
    print(f"  1. restart the server so it loads the patched file (the probe prints {_how_often(records[0][0])})")
    print("  2. send a request, then read what it printed (only the lines of the server running then):")
    print(f"       workbench probe read {host} {what} {where}")
    print("  3. revert it (restores the file byte for byte):")
    for probe, _, _ in reversed(records):
        print(f"       workbench probe revert {host} --tag {probe.tag}")
    return ExitCode.OK


def _probe_recipes(args: argparse.Namespace) -> ExitCode:
    from workbench.engine.recipes import recipes_for

    engine = args.engine or "sglang"
    if args.json:
        print(json.dumps([{**r.to_dict(), "engine": engine} for r in recipes_for(engine).values()], indent=2))
        return ExitCode.OK
    if engine != "sglang":
        print("vLLM's recipes (on its own code path, workbench.engine.codepath_vllm):")
    _print_recipes(recipes_for(engine))
    if engine == "sglang":
        print("vLLM's recipes (same names, vLLM's code path): workbench probe recipes --engine vllm")
    print("add one with: workbench probe add --host H --recipe NAME [--python P | --port N] [--package PKG]")
    print("read it:      workbench probe read --host H --recipe NAME --port N   (the lines of the server running now)")
    return ExitCode.OK


def _print_recipes(table: dict) -> None:
    for r in table.values():
        print(f"{r.name}")
        print(f"  shows:   {r.description}")
        for i, rp in enumerate(r.probes):
            nth = "" if rp.occurrence == 0 else f" (its line no. {rp.occurrence + 1})"
            head = "  where:   " if len(r.probes) == 1 else f"  probe {r.name + rp.suffix}: "
            print(f"{head}before the code-path entry {rp.entry}{nth} (found in the box's own source)"
                  + (f"; {rp.role}" if rp.role else ""))
            how = (f"once per distinct {rp.once_per} (at most {rp.max_prints} lines)" if rp.once_per is not None
                   else "once per process") + (f", only when {rp.when}" if rp.when is not None else "")
            print(f"    prints {how}: {', '.join(rp.exprs)}")
        print(f"  reading: {r.reads}")
        if r.limits:
            print(f"  limits:  {r.limits}")


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
                  + (f"  (once per {p.once_per}, at most {p.max_prints} lines)" if p.once_per is not None else "")
                  + (f"  (only when {p.when})" if p.when is not None else ""))
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
        for b in getattr(entry, "bytecode", ()):
            print(f"  its bytecode cache {b['cache']} ({b.get('kind', 'unchecked-hash')}) put back byte for byte")
        if entry.owner_note:
            print(f"  {entry.owner_note}")
    if problems and (args.all or args.file):
        _probe_journal_problems(args.prog, problems)
        if args.all:
            return ExitCode.FAILURE
    return ExitCode.FAILURE if failures else ExitCode.OK


def _server_started(box: Any, pid: int, timeout: float) -> tuple[Optional[str], Optional[float]]:
    """``(text, epoch seconds)`` of when process ``pid`` started, on the box's clock: its start in
    clock ticks after boot (``/proc/PID/stat`` field 22) against ``/proc/uptime`` and ``date``
    (10 ms resolution), and ``ps -o lstart=`` for the text. ``(None, None)`` when the box cannot
    say (not Linux, the process gone); the text alone when only ``ps`` answers."""
    pid = int(pid)
    res = box.run(f"getconf CLK_TCK; cut -d' ' -f1 /proc/uptime; date +%s.%N; cat /proc/{pid}/stat; "
                  f"echo; ps -o lstart= -p {pid}", timeout=timeout, check=False)
    rows = res.stdout.splitlines()
    text = " ".join(rows[-1].split()) if rows and rows[-1].strip() else None
    try:
        ticks, uptime, now = float(rows[0]), float(rows[1]), float(rows[2])
        start_ticks = float(rows[3].rsplit(")", 1)[1].split()[19])  # field 22; comm (field 2) may hold spaces
    except (IndexError, ValueError):
        return text, None
    return text, now - (uptime - start_ticks / ticks)


def _launch_counts(readings: Sequence[Any], pgid: Optional[int]) -> tuple[dict, int]:
    """``({other pgid: lines}, lines of unknown launch)`` among ``readings`` not printed by ``pgid``."""
    others: dict = {}
    unknown = 0
    for r in readings:
        if r.pgid is None:
            unknown += 1
        elif r.pgid != pgid:
            others[r.pgid] = others.get(r.pgid, 0) + 1
    return others, unknown


def _print_readings(readings: Sequence[Any]) -> None:
    for r in readings:
        who = f"pgid {r.pgid}, pid {r.pid}" if r.pgid is not None else "launch unknown: an older probe block"
        print(f"  line {r.line_number} ({who}):")
        if r.error:
            print(f"    the probe itself failed: {r.error}")
            continue
        for expr, value in r.values.items():
            raw = r.raw[expr]
            shown = raw if isinstance(value, str) and value == raw else repr(value)
            print(f"    {expr} = {shown}" + ("   (raised)" if expr in r.errors else ""))


def _elsewhere(others: dict, unknown: int) -> str:
    """``"N lines in the log are from an earlier launch (pgid ...)"`` and/or the lines of unknown launch."""
    parts = []
    n = sum(others.values())
    if n:
        parts.append(f"{n} line{'s' if n != 1 else ''} in the log {'are' if n != 1 else 'is'} from an earlier launch"
                     f" (pgid {', '.join(map(str, others))})")
    if unknown:
        parts.append(f"{unknown} line{'s' if unknown != 1 else ''} carr{'y' if unknown != 1 else 'ies'} no pgid "
                     "(printed by an older probe block: of unknown launch)")
    return " and ".join(parts)


def _probe_read(args: argparse.Namespace, box: Any) -> ExitCode:
    from remote import probes
    from remote.errors import RemoteFileNotFound, RemoteIsADirectory, RemotePermissionError
    from workbench.engine import running_servers
    from workbench.engine.recipes import RECIPES, VLLM_RECIPES, missing_required, params_left_at_init, recipe_of, \
        weights_unmatched

    if (args.tag is None) == (args.recipe is None):
        raise CliError("give exactly one of --tag TAG or --recipe NAME")
    if args.tag is not None and not probes.TAG_RE.match(args.tag):
        raise CliError(f"--tag {args.tag!r} is not a probe tag (regex {probes.TAG_RE.pattern})")
    if args.recipe is not None and args.recipe not in RECIPES and args.recipe not in VLLM_RECIPES:
        raise CliError(f"no probe recipe {args.recipe!r} (recipes: {', '.join(dict.fromkeys([*RECIPES, *VLLM_RECIPES]))})")
    if args.log is None and args.port is None:
        raise CliError("give --port N (the running server's lines in its log) or --log FILE [--pgid G]")
    if args.port is not None and args.pgid is not None:
        raise CliError("--pgid G names a launch; --port N already does (the server running on it): give one")
    server = None
    started_text, started_at = None, None
    if args.port is not None:
        servers = running_servers(box, port=args.port, timeout=args.timeout)
        if not servers:
            raise CliError(f"no server runs on port {args.port} on {box.name}; pass --log FILE (and --pgid G "
                           "for one launch's lines)")
        server = servers[0]
        if args.log is None and not server.log_path:
            raise CliError(f"the server on port {args.port} (pid {server.pid}) does not write its stderr "
                           "to a file; pass --log FILE")
        started_text, started_at = _server_started(box, server.pid, args.timeout)
    log = box.expand_path(args.log) if args.log is not None else server.log_path
    pgid = server.pgid if server is not None else args.pgid
    launch = None
    if server is not None:
        launch = (f"the server running now (pid {server.pid}"
                  + (f", started {started_text}" if started_text else "") + ")")
    elif pgid is not None:
        launch = f"launch pgid {pgid}"

    journal = probes.list_probes(box, timeout=args.timeout)
    recipe_engine = "sglang"
    if args.recipe:
        mine = [p for p in journal if recipe_of(p) == args.recipe]
        # whose recipe: the engine whose probe expressions the journal holds (else the only one that has it)
        vllm_exprs = {rp.exprs for rp in VLLM_RECIPES[args.recipe].probes} if args.recipe in VLLM_RECIPES else set()
        if (mine and all(p.exprs in vllm_exprs for p in mine)) or args.recipe not in RECIPES:
            recipe_engine = "vllm"
        table = VLLM_RECIPES if recipe_engine == "vllm" else RECIPES
        suffixes = {rp.exprs: rp.suffix for rp in table[args.recipe].probes}
        mine = [p for p in mine if p.exprs in suffixes]
        bases = [p.tag[: len(p.tag) - len(suffixes[p.exprs])] for p in mine if p.tag.endswith(suffixes[p.exprs])]
        base = bases[0] if bases else args.recipe
        targets: list = mine or [args.recipe + rp.suffix for rp in table[args.recipe].probes]
    else:
        targets = [next((p for p in journal if p.tag == args.tag), args.tag)]
        base = None
    found: list = []
    try:
        for target in targets:
            found.extend(probes.read_probe_log(box, log, target, timeout=args.timeout))
    except (RemoteFileNotFound, RemoteIsADirectory, RemotePermissionError) as exc:
        raise CliError(f"cannot read the log: {one_line(exc)}") from None
    found.sort(key=lambda r: r.line_number)
    readings = [r for r in found if pgid is None or r.pgid == pgid]
    others, unknown = _launch_counts(found, pgid) if pgid is not None else ({}, 0)
    what = f"recipe {args.recipe}" if args.recipe else f"probe {args.tag}"
    tags = [t.tag if isinstance(t, probes.Probe) else t for t in targets]
    result = None
    missing: list = []
    if args.recipe:
        missing = missing_required(args.recipe, readings, tag=base, engine=recipe_engine)
        if args.recipe == "draft-weights-unmatched":
            result = {"unmatched": weights_unmatched(readings)}
        elif args.recipe == "draft-params-at-init":
            result = params_left_at_init(readings).to_dict()
    if args.json:
        out = {"tag": args.tag, "recipe": args.recipe, "tags": tags, "log": log,
               "launch": None if pgid is None else {"pgid": pgid, "pid": server.pid if server else None,
                                                    "started": started_text, "port": args.port},
               "readings": [r.to_dict() for r in readings],
               "other_launches": {str(k): v for k, v in others.items()}, "unknown_launch": unknown}
        if args.recipe:
            out.update({"missing": missing, "result": result})
        print(json.dumps(out, indent=2))
    else:
        print(f"{what} in {log}: {len(readings)} line(s)" + (f" from {launch}" if launch else ""))
        _print_readings(readings)
        if readings and (others or unknown):
            print(f"  (not shown: {_elsewhere(others, unknown)})")
        if result is not None and not missing:
            if args.recipe == "draft-weights-unmatched":
                names = result["unmatched"]
                print("  unmatched checkpoint names: " + (", ".join(names) if names else
                                                          "none (every name reached a parameter)"))
            else:
                faults, shared = result["faults"], result["shared_from_target"]
                print("  left at their initial values: " + (", ".join(f"{k} (norm {v})" for k, v in faults.items())
                                                             if faults else "none"))
                if shared:
                    print(f"  also unwritten, taken from the target right after: {', '.join(shared)}")
    if readings and not missing:
        return ExitCode.OK
    known = [p for p in journal if p.tag in tags]
    if server is not None and started_at is not None and known and max(p.created_at for p in known) > started_at + 0.5:
        hint = "; it started before the probe was added: restart it so it loads the patched file"
    elif server is not None:
        hint = "; send a request (a probe prints when its code runs)"
    else:
        hint = ""
    if readings:  # a recipe whose required probes did not all print
        where = f"from {launch}" if launch else f"in {log}"
        raise CliError(f"{what}: no {' or '.join(f'[probe:{t}]' for t in missing)} line {where} yet, so its "
                       f"readings are incomplete{hint or '; send a request'}", ExitCode.FAILURE)
    label = " or ".join(f"[probe:{t}]" for t in (missing or tags))
    if others or unknown:
        raise CliError(f"no {label} line from {launch} — {_elsewhere(others, unknown)}{hint}", ExitCode.FAILURE)
    if not known:
        why = f"no probe {tags[0]!r} is in the journal on {box.name}: was it added?"
    elif server is not None:
        why = f"{what} is in the journal{hint}"
    else:
        why = f"{what} is in the journal: restart the server so it loads the patched file, then send a request"
    raise CliError(f"no {label} line at all in {log}" + (f" (looked for {launch}'s)" if launch else "")
                   + f" yet; {why}", ExitCode.FAILURE)


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


#: The probe subcommands that change the box: they hold its run lock while they run.
LOCKED_COMMANDS = ("add", "revert")


def _run_on_box(args: argparse.Namespace) -> ExitCode:
    """``workbench probe add|list|revert|read``: ``args.probe_func(args, box)`` on the ``--host``
    box. ``add`` and ``revert`` change the engine's files, so they hold the box's run lock while
    they run (:func:`workbench.session.box_session.holding_run_lock`, as the runbooks do): while a
    runbook (or another ``probe add``) holds it they refuse with
    :class:`~workbench.session.runlock.RunLocked`, exit 2, naming the holder, before anything is
    changed. ``list`` and ``read`` only read: no lock. The box layer's and the engine lookup's
    errors are worded in one line (a ``RemoteError`` outside the probe family with its class name,
    a compile error with the compiler's line); their exit codes are
    :func:`~workbench.cli.common.exit_code_for`'s (``ProbeConflict`` 1, the rest 2)."""
    from remote.errors import ProbeCompileError, ProbeError, RemoteError, RemoteFileNotFound
    from workbench.engine import EngineNotFound, SourceLookupError
    from workbench.session.box_session import holding_run_lock

    try:
        with open_box(args) as box:
            if args.probe_command not in LOCKED_COMMANDS:
                return args.probe_func(args, box)
            with holding_run_lock(box, args.host, f"workbench probe {args.probe_command}",
                                  timeout=min(float(args.timeout), 30.0)):
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
                                  "(srt/models/llama_eagle3.py); either way it must resolve inside that root")
    q.add_argument("--before", help="regex matching the one line the probe goes before")
    q.add_argument("--line", type=int, help="1-based line number the probe goes before")
    q.add_argument("--function", help="restrict the anchor to this function (func or Class.method)")
    q.add_argument("--print", action="append", metavar="EXPR",
                   help="a Python expression to print (repeatable); it must only read: names, attributes, "
                        "subscripts, constants, operators, comprehensions and calls of pure functions/methods "
                        "(len, repr, .shape is an attribute, .size(), .float(), .sum(), .item(), .tolist(), ...); "
                        "anything else (getattr, __import__, open, lambdas, x.zero_()) is refused, exit 2")
    q.add_argument("--once-per", metavar="EXPR",
                   help="print once per distinct value of EXPR in each process (e.g. hidden_states.shape[-1]) "
                        "instead of once per process")
    q.add_argument("--max-prints", type=positive_int, metavar="N",
                   help="with --once-per (or a recipe that prints once per key): at most N lines per process "
                        "(default 8)")
    q.add_argument("--when", metavar="EXPR",
                   help="print only on a call where EXPR is true (e.g. 'param_name not in params_dict'); evaluated "
                        "inside the probe's guard: a condition that raises prints one <probe failed:...> line")
    q.add_argument("--tag", help="the probe's name (default: the file stem and line, or the recipe name)")
    q.add_argument("--recipe", help="a named probe on the EAGLE-3 code path (see `workbench probe recipes`)")
    q.add_argument("--target-arch", default="LlamaForCausalLM", help="with --recipe: the target's architecture")
    q.add_argument("--draft-arch", default="LlamaForCausalLMEagle3", help="with --recipe: the draft's architecture")
    q.add_argument("--method", help="with --recipe on vLLM: the --speculative-config method the draft class is "
                                    "looked up for (default: the running server's, else eagle3)")
    add_json_option(q, "the probe added")

    q = probe_sub.add_parser("recipes", help="the named probes on the EAGLE-3 code path")
    q.add_argument("--engine", choices=("sglang", "vllm"), help="whose recipes: SGLang's (default; also the "
                                                                 "sandbox box's) or vLLM's")
    add_json_option(q, "the recipes")
    set_command(q, _probe_recipes)

    q = on_box("list", _probe_list, help="the probes in the box's journal and their files' state")
    add_json_option(q, "the journal")

    q = on_box("revert", _probe_revert, help="remove probes, restoring the files byte for byte")
    q.add_argument("--tag", help="the probe to revert")
    q.add_argument("--file", help="revert every probe on this file, newest first (absolute, or the end of the path)")
    q.add_argument("--all", action="store_true", help="revert every probe on the box, newest first")

    q = on_box("read", _probe_read, help="what a probe printed into the server's log, parsed",
               description="What a probe (or every probe of a recipe) printed into the server's log, parsed. "
                           "With --port only the lines of the server running on that port count (its process "
                           "group, pgid): the same tag printed by an earlier launch into an appended log is not "
                           "new evidence.")
    q.add_argument("--tag", help="the probe to read")
    q.add_argument("--recipe", help="read every probe of this recipe (and its answer: the unmatched names, the "
                                    "parameters left at init)")
    q.add_argument("--log", help="the server's log file on the box (default with --port: where its stderr goes)")
    add_port_option(q, "the running server's port: its log, and only the lines its launch printed")
    q.add_argument("--pgid", type=positive_int, metavar="G",
                   help="with --log: only the lines printed by the launch whose process group is G")
    add_json_option(q, "the readings")
