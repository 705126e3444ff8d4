"""``workbench source``: read the engine's source on a box, exactly.

    workbench source locate [BOX] [--json]                       the engine package, version, interpreter
    workbench source show FILE[:LINE] [-C N] [BOX]               numbered lines (FILE relative to the package)
    workbench source find NAME [--file FILE] [-C N] [BOX]        definitions (func, Class, Class.method) via ast
    workbench source map [--launch CMD [--cwd DIR]] [--target-arch A] [--draft-arch A] [--aux-ids 1,3,6]
                         [--num-layers N] [BOX] [--json]         the EAGLE-3 code-path map for this version
    workbench source scan [same as map]                          swallowed errors / silent fallbacks on that path

BOX is ``--host SPEC`` (default local) with ``--python P`` (the interpreter that runs the
server), ``--port N`` (take the server running on that port), ``--package PKG``
(``workbench.sandbox`` for the sandbox box's engine, ``vllm`` for vLLM) or ``--engine-root DIR``
(that sglang or vllm package directory, e.g. another release's unpacked wheel); ``--timeout S`` for
each box call (default 30). On vLLM, ``map`` / ``scan`` read vLLM's code path
(:mod:`workbench.engine.codepath_vllm`); ``--aux-ids`` are then the draft config's nested
``eagle_config.eagle_aux_hidden_state_layer_ids`` (SGLang's layout, which vLLM's V1 runner reads).
Exit codes: 0 done, 2 the command could not run (bad arguments, no engine, unreachable box).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from workbench.cli.argtypes import layer_ids, positive_int
from workbench.cli.common import ExitCode, add_box_options, add_json_option, add_port_option, open_box, set_command

__all__ = ["add_parser"]


def _box_args(p: argparse.ArgumentParser) -> None:
    """The box and engine options every ``workbench source`` action takes, then ``--json``."""
    add_box_options(p, timeout=30.0)
    p.add_argument("--python", help="the interpreter on the box that runs the server (default: the running "
                                     "server's, else python3)")
    add_port_option(p, "take the engine of the server running on this port")
    p.add_argument("--package", help="the engine package (default: what the server runs, else sglang; "
                                     "workbench.sandbox for the sandbox box)")
    p.add_argument("--engine-root", metavar="DIR", help="read the sglang package directory DIR on the box instead of "
                   "locating one (another release's tree, a checkout's python/sglang)")
    add_json_option(p, "the result")


def _split_file_line(text: str) -> tuple[str, int | None]:
    head, sep, tail = text.rpartition(":")
    if sep and tail.isdigit():
        return head, int(tail)
    return text, None


def _run(args: argparse.Namespace) -> ExitCode:
    """``workbench source <action>``: see the module docstring. Raises what it meets on the way
    (``EngineNotFound``, ``SourceLookupError``, ``CheckpointError``, ``LaunchCommandError``, the box
    layer's ``RemoteError``): the command line prints each as one line, exit 2."""
    from workbench.engine import find_engine
    from workbench.engine.codepath import code_path_map
    from workbench.engine.codepath_vllm import map_for_engine
    from workbench.engine.launch import LaunchCommand
    from workbench.rules.engine_source import scan_swallowed

    launch = LaunchCommand.parse(args.launch) if getattr(args, "launch", None) else None
    with open_box(args) as box:
        if args.engine_root is not None:
            from workbench.engine.locate import engine_at

            engine = engine_at(box, args.engine_root, timeout=args.timeout)
        else:
            engine = find_engine(box, python=args.python, port=args.port, launch=launch, package=args.package,
                                 timeout=args.timeout)
        src = engine.source(box, timeout=args.timeout)
        out: Any
        if args.action == "locate":
            out = engine.to_dict()
            text = "\n".join(f"{k:<10} {v}" for k, v in out.items() if v is not None)
        elif args.action == "show":
            path, line = _split_file_line(args.target)
            if line is None:
                lines = src.lines(path)
                width = len(str(len(lines)))
                text = src.path(path) + "\n" + "\n".join(f"  {n:>{width}} | {t}" for n, t in enumerate(lines, 1))
                out = {"file": src.path(path), "lines": lines}
            else:
                excerpt = src.show(path, line, args.context)
                out, text = excerpt.to_dict(), str(excerpt)
        elif args.action == "find":
            defs = src.find_definition(args.name, file=args.file)
            out = [d.to_dict() for d in defs]
            parts = []
            for d in defs:
                parts.append(str(d))
                if args.context:
                    parts.append(str(src.show(d.file, d.line, args.context)))
            text = "\n".join(parts)
        else:
            notes: list[str] = []
            explicit = any(v is not None for v in (args.target_arch, args.draft_arch, args.aux_ids, args.num_layers))
            deployment = launch or (LaunchCommand.parse(engine.launch) if engine.launch else None)
            is_vllm = getattr(engine, "engine", "sglang") == "vllm"
            if is_vllm:
                from workbench.engine.codepath_vllm import vllm_code_path_map
            if deployment is not None and not explicit:
                # relative model paths: against the running server's cwd, else --cwd (default: this
                # directory on the local box, the login directory over SSH), as `workbench doctor` does
                cwd = engine.cwd if launch is None else (
                    args.cwd or (os.getcwd() if box.name == "local" else box.expand_path("~")))
                from workbench.engine.locate import read_environ

                # the running server's own environment decides the EAGLE worker (SGLANG_ENABLE_SPEC_V2)
                environ = read_environ(box, engine.server_pid, timeout=args.timeout) \
                    if launch is None and engine.server_pid else None
                cmap = map_for_engine(box, src, deployment, engine=getattr(engine, "engine", "sglang"), cwd=cwd,
                                      timeout=args.timeout, notes=notes, environ=environ)
            elif is_vllm:
                kw = {k: v for k, v in (("target_arch", args.target_arch), ("draft_arch", args.draft_arch),
                                        ("num_layers", args.num_layers)) if v is not None}
                if args.aux_ids is not None:
                    kw["draft_config"] = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": list(args.aux_ids)}}
                cmap = vllm_code_path_map(src, **kw)
            else:
                kw = {k: v for k, v in (("target_arch", args.target_arch), ("draft_arch", args.draft_arch),
                                        ("aux_ids", args.aux_ids), ("num_layers", args.num_layers)) if v is not None}
                cmap = code_path_map(src, **kw)
            if args.action == "map":
                out = {**cmap.to_dict(), "engine": engine.to_dict(), "notes": notes}
                text = cmap.to_text() + "".join(f"\nnote: {n}" for n in notes)
            else:
                findings = scan_swallowed(src, cmap)
                out = {"findings": [f.to_dict() for f in findings], "engine": engine.to_dict(), "notes": notes}
                text = "\n".join(f"{f.rule} [{f.severity}] {f.message}" for f in findings) or \
                    "no swallowed error or silent fallback on the EAGLE-3 path"
    print(json.dumps(out, indent=2, default=str) if args.json else text)
    return ExitCode.OK


def add_parser(sub: Any) -> None:
    """Register ``workbench source`` (locate / show / find / map / scan) on the CLI's subparsers
    (``argparse`` ``add_subparsers()``)."""
    p = sub.add_parser("source", help="read the engine's source on the box: locate, show, find, map, scan",
                       description=__doc__.split("\n\n")[0])
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("locate", help="the engine package, version and interpreter on the box")
    _box_args(a)
    set_command(a, _run)
    a = actions.add_parser("show", help="numbered source lines: FILE[:LINE] relative to the package or absolute")
    a.add_argument("target", metavar="FILE[:LINE]")
    a.add_argument("-C", "--context", type=int, default=8, help="lines of context around LINE (default 8)")
    _box_args(a)
    set_command(a, _run)
    a = actions.add_parser("find", help="where a function, class or Class.method is defined (ast)")
    a.add_argument("name")
    a.add_argument("--file", help="search only this file")
    a.add_argument("-C", "--context", type=int, default=0, help="also show N lines around each definition")
    _box_args(a)
    set_command(a, _run)
    for name, what in (("map", "the EAGLE-3 code-path map: (file, line, what happens there)"),
                       ("scan", "swallowed errors and silent fallbacks on the EAGLE-3 path")):
        a = actions.add_parser(name, help=what)
        a.add_argument("--launch", help="the deployment's launch command (models read for the target/draft "
                                        "classes; default: the running server's)")
        a.add_argument("--target-arch", help="target class (default: from the target config, else LlamaForCausalLM)")
        a.add_argument("--draft-arch", help="draft class (default: from the draft config, else "
                                            "LlamaForCausalLMEagle3)")
        a.add_argument("--aux-ids", type=layer_ids, help="the draft's aux layer ids, to evaluate the offset rule")
        a.add_argument("--num-layers", type=positive_int, help="the target's layer count, to evaluate the offset rule")
        a.add_argument("--cwd", help="with --launch: the directory the server starts in, for relative model paths "
                                     "(default: this directory on the local box, the login directory over SSH)")
        _box_args(a)
        set_command(a, _run)
