"""``workbench doctor``: every preflight rule on a launch command or the server running on the box.

    workbench doctor --launch "CMD" [--cwd DIR] | --running [--port N]  [--engine-root DIR] [--host SPEC] [--json] [--timeout S]

Runs every static rule of the catalogue (:func:`workbench.doctor.run_doctor`,
``docs/rules.md``) on ``--launch`` (relative paths against ``--cwd``: default this directory
on the local box, the login directory over SSH) or on the command line of the SGLang or vLLM server
running on the box (``--running``; ``--port`` picks one when several run; relative paths against its
cwd; its engine located from that process — its interpreter, cwd and environment, else the files it has
mapped — whatever directory the doctor runs in), reading the models' files on the box. With ``--running``
it also prints the server's current acceptance, judged by the one definition ``workbench logs`` and
``workbench measure`` use (``acceptance: low: 1.12 of a possible 4.00 (< 45 % of the ceiling)``; ``unknown``
when nothing was measured yet; JSON key ``acceptance_level``): SGLang's from the end of its log's decode
lines (else its ``/metrics`` gauge), vLLM's from its ``/metrics`` spec-decode counters
(:mod:`workbench.measure.running`; no request is sent, each read bounded by ``--timeout``). A vLLM launch (``vllm serve MODEL ...``, ``python -m
vllm.entrypoints.openai.api_server ...``) gets the engine-neutral rules, the cross-engine ones (aux-id
convention, draft layout, method) and vLLM's own, with vLLM's facts read from the vLLM its interpreter
imports; the rules that encode SGLang's code are listed in a note as not run. Prints the findings (``rule``, ``severity``, ``message``,
``evidence``, ``fix``) and the corrected launch command, or with ``--json`` the report as JSON.

Exit codes: 0 no error finding, 1 at least one error finding, 2 the doctor could not run (a launch
command that cannot be parsed or names no model, no server running, an unreachable box).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from workbench.cli.common import (
    CliError, ExitCode, add_box_options, add_json_option, add_port_option, open_box, reworded, set_command,
)

__all__ = ["add_parser"]


def _run(args: argparse.Namespace) -> ExitCode:
    """``workbench doctor``: every static rule on a launch command (``--launch``) or on the server
    already running on the box (``--running``: its command line from ``Box.find_servers``, relative
    paths against its cwd). Returns the report's exit code; raises :class:`CliError` (an error
    while the doctor runs is worded ``<ErrorClass>: <message>``) and what connecting raises."""
    from remote.errors import RemoteError
    from workbench.checkpoint import CheckpointError
    from workbench.doctor import DoctorError, run_doctor
    from workbench.engine.launch import LaunchCommand, LaunchCommandError
    from workbench.errors import EngineNotFound

    if (args.launch is not None) == bool(args.running):
        raise CliError("give exactly one of --launch \"<command>\" or --running")
    launch = LaunchCommand.parse(args.launch) if args.launch is not None else None
    with open_box(args) as box:
        try:
            cwd = server = None
            if launch is not None:
                cwd = args.cwd or (str(Path.cwd()) if box.name == "local" else box.expand_path("~"))
            else:
                from workbench.engine.locate import is_launch_argv

                servers = [s for s in box.find_servers(timeout=args.timeout) if is_launch_argv(s.argv)]
                if args.port is not None:
                    servers = [s for s in servers if s.port == args.port]
                if not servers:
                    raise CliError(f"no SGLang or vLLM server running on {box.name}"
                                   + (f" on port {args.port}" if args.port is not None else ""))
                if len(servers) > 1:
                    raise CliError(f"{len(servers)} servers run on {box.name} (ports "
                                   f"{', '.join(str(s.port) for s in servers)}); pick one with --port")
                server = servers[0]
                launch, cwd = LaunchCommand.parse(list(server.argv)), server.cwd
            engine_root = engine_version = None
            if args.engine_root is not None:
                from workbench.engine.locate import engine_at

                found = engine_at(box, args.engine_root, timeout=args.timeout)
                engine_root, engine_version = found.root, found.version
            report = run_doctor(box, launch, timeout=args.timeout, cwd=cwd, engine_root=engine_root,
                                engine_version=engine_version, server=server, remedy=REMEDY)
        except (DoctorError, CheckpointError, RemoteError, LaunchCommandError, EngineNotFound) as exc:
            raise reworded(exc, f"{type(exc).__name__}: {exc}") from exc
        if server is not None:
            from workbench.measure.running import running_acceptance

            # a failure to read it is a note on the report (never an error): the static findings stand
            report.running_acceptance = running_acceptance(box, server, launch, timeout=args.timeout).to_dict()
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(report.to_text())
    return ExitCode(report.exit_code)


#: What ``workbench doctor``'s user can give when the engine on the box is not found (its own options).
REMEDY = ("give the engine's package directory on the box with --engine-root DIR (e.g. .../site-packages/sglang or "
          ".../site-packages/vllm)")


def add_parser(sub: Any) -> None:
    """Register ``workbench doctor`` on the CLI's subparsers (``argparse`` ``add_subparsers()``)."""
    p = sub.add_parser("doctor", help="static checks of a launch command against the box's files",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--launch", help="the server's launch command")
    p.add_argument("--running", action="store_true", help="check the command line of the server running on the box")
    add_port_option(p, "with --running: the server's port when several run")
    p.add_argument("--cwd", help="with --launch: the directory the server starts in, for relative paths in the "
                                 "command (default: this directory on the local box, the login directory over SSH)")
    p.add_argument("--engine-root", metavar="DIR", help="the engine's package directory on the box (sglang, or vllm for a "
                   "vLLM launch) whose rules and flags apply (default: located with the launch command's interpreter); "
                   "e.g. another release's tree")
    add_box_options(p, timeout=30.0)
    add_json_option(p, "the report")
    set_command(p, _run)
