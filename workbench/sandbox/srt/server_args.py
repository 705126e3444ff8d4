"""Command-line arguments of the sandbox server, with SGLang 0.5.23's flag names and rules.

Mirrors SGLang 0.5.23, srt/server_args.py + srt/arg_groups/fields/spec.py (flag names,
`--speculative-draft-model` alias) and srt/arg_groups/speculative_hook.py (parameter rules):
- `--speculative-algorithm` is upper-cased; NEXTN is an alias of EAGLE; unknown names raise.
- `--speculative-num-steps` unset -> topk and num_draft_tokens must be unset too; then defaults
  are chosen from the TARGET architecture ((5, 4, 8) for `LlamaForCausalLM`, (3, 1, 4) else).
- topk == 1 and num_draft_tokens != steps + 1 -> warning, forced to steps + 1.
- `--speculative-num-steps 0` is accepted, as SGLang accepts it: drafting disabled, one draft
  token (the verify step emits the target's one token; accept length 1.00).
Sandbox limits (clear errors): chain drafting only (topk > 1 exits), EAGLE / EAGLE3 / NEXTN only,
a negative `--speculative-num-steps` refused.

Implemented too: `--tp-size` / `--tp` / `--tensor-parallel-size` (rank processes,
`workbench.sandbox.srt.managers.tp_ranks`), `--base-gpu-id`, `--mem-fraction-static` (sandbox GPU
memory, `workbench.sandbox.gpus`), `--nccl-port`, `--dist-init-addr`; and the sandbox's own
`--sandbox-load-seconds S`, `--sandbox-fault MODE` (`workbench.sandbox.srt.startup`). Any other
SGLang flag (`--trust-remote-code`, `--chunked-prefill-size 4096`, ...) is accepted and logged as
ignored, so a real box's launch command replays here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from workbench.sandbox.srt.speculative.spec_info import SpeculativeAlgorithm

logger = logging.getLogger(__name__)


class ServerArgsError(ValueError):
    """A flag value the sandbox cannot run with (the launcher prints it and exits 2)."""


@dataclass
class ServerArgs:
    """Resolved server arguments (field names = SGLang's `ServerArgs` attribute names)."""

    model_path: str
    tokenizer_path: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 30000
    context_length: Optional[int] = None
    served_model_name: Optional[str] = None
    log_level: str = "info"
    decode_log_interval: int = 40
    enable_metrics: bool = False
    random_seed: int = 0
    tp_size: int = 1
    base_gpu_id: int = 0
    mem_fraction_static: float = 0.88
    nccl_port: Optional[int] = None
    dist_init_addr: Optional[str] = None
    dp_size: int = 1
    pp_size: int = 1
    page_size: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    disable_cuda_graph: bool = True
    speculative_algorithm: Optional[str] = None
    speculative_draft_model_path: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    speculative_token_map: Optional[str] = None
    api_key: Optional[str] = None
    admin_api_key: Optional[str] = None
    sandbox_load_seconds: float = 0.0
    sandbox_fault: Optional[str] = None
    launch_command: str = ""
    ignored_args: List[str] = field(default_factory=list)

    def resolved_dict(self) -> dict:
        """Every resolved argument as a plain dict (what `/server_info` spreads)."""
        d = dataclasses.asdict(self)
        d.pop("launch_command")
        return d


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def _positive_int(text: str) -> int:
    value = _int(text, "a positive integer")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text, "a non-negative integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1], got {text}")
    return value


#: The longest start-up ``--sandbox-load-seconds`` spreads (a day: longer is a typo, and ``inf``
#: would overflow the paced phases' timestamps).
MAX_LOAD_SECONDS = 86400.0


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a non-negative number of seconds, got {text!r}") from None
    if not 0 <= value <= MAX_LOAD_SECONDS:
        raise argparse.ArgumentTypeError(f"must be a number of seconds from 0 to {MAX_LOAD_SECONDS:g}, got {text}")
    return value


def _host_port(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT, got {text}")
    return text


#: the start-up phases ``hang:PHASE`` may name (docs: /tmp/wb interfaces, "Sandbox server flags")
FAULT_PHASES = ("nccl-init", "load", "load-draft", "capture", "capture-draft", "warmup")
SANDBOX_FAULTS = ("orphan-ranks", "term-ignored", "port-held")


def _sandbox_fault(text: str) -> str:
    if text in SANDBOX_FAULTS or (text.startswith("hang:") and text[5:] in FAULT_PHASES):
        return text
    raise argparse.ArgumentTypeError(
        f"must be one of {', '.join(SANDBOX_FAULTS)} or hang:PHASE with PHASE one of {', '.join(FAULT_PHASES)}; "
        f"got {text}")


def _port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"must be a TCP port in 1..65535, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for the flags the sandbox implements (SGLang names)."""
    p = argparse.ArgumentParser(
        prog="python -m workbench.sandbox.launch_server",
        description="SGLang-compatible sandbox server (tiny target + EAGLE-3 draft, CPU).",
        allow_abbrev=False,
    )
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path", dest="tokenizer_path")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_port, default=30000)
    p.add_argument("--context-length", dest="context_length", type=_positive_int)
    p.add_argument("--served-model-name", dest="served_model_name")
    p.add_argument("--log-level", dest="log_level", default="info",
                   choices=["debug", "info", "warning", "error", "critical"])
    p.add_argument("--decode-log-interval", dest="decode_log_interval", type=_positive_int, default=40)
    p.add_argument("--random-seed", dest="random_seed", type=int, default=0)
    p.add_argument("--enable-metrics", dest="enable_metrics", action="store_true",
                   help="Enable log prometheus metrics (served at /metrics).")
    p.add_argument("--speculative-algorithm", dest="speculative_algorithm")
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path")
    # SGLang 0.5.23 takes any int here (arg_groups/fields/spec.py:58-61); 0 disables drafting
    # (eagle_worker_v2.py:1469). The sandbox refuses only negative values.
    p.add_argument("--speculative-num-steps", dest="speculative_num_steps", type=_non_negative_int)
    p.add_argument("--speculative-eagle-topk", dest="speculative_eagle_topk", type=_positive_int)
    p.add_argument("--speculative-num-draft-tokens", dest="speculative_num_draft_tokens", type=_positive_int)
    p.add_argument("--speculative-token-map", dest="speculative_token_map")
    # SGLang 0.5.23 server_args.py: with --api-key every request but /health* and /metrics needs
    # `Authorization: Bearer KEY` (utils/common.py add_api_key_middleware); 401 otherwise.
    p.add_argument("--api-key", dest="api_key")
    p.add_argument("--admin-api-key", dest="admin_api_key")
    # SGLang 0.5.23 srt/arg_groups/fields/parallel.py: --tp-size (alias --tensor-parallel-size;
    # `--tp` is argparse's unambiguous abbreviation of it), --nccl-port, --dist-init-addr (alias
    # --nccl-init-addr); fields/device.py: --base-gpu-id; fields/schedule.py: --mem-fraction-static
    p.add_argument("--tp-size", "--tensor-parallel-size", "--tp", dest="tp_size", type=_positive_int, default=1)
    p.add_argument("--base-gpu-id", dest="base_gpu_id", type=_non_negative_int, default=0)
    p.add_argument("--mem-fraction-static", dest="mem_fraction_static", type=_fraction, default=0.88)
    p.add_argument("--nccl-port", dest="nccl_port", type=_port)
    p.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", type=_host_port)
    # the sandbox's own flags (not SGLang's): see workbench.sandbox.srt.startup
    p.add_argument("--sandbox-load-seconds", dest="sandbox_load_seconds", type=_non_negative_float, default=0.0,
                   help="spread the start-up over this many seconds with SGLang's log lines (sandbox only)")
    p.add_argument("--sandbox-fault", dest="sandbox_fault", type=_sandbox_fault,
                   help="orphan-ranks | term-ignored | port-held | hang:PHASE (sandbox only)")
    return p


#: SGLang 0.5.23's own flag table (generated from the published wheel), read as data: the flags a
#: real ``launch_server`` accepts. The sandbox ignores those it does not implement and refuses the
#: rest the way SGLang's argparse does ("unrecognized arguments").
_SGLANG_FLAGS_JSON = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                  "engine", "data", "sglang-0.5.23-flags.json")


def _sglang_option_strings() -> set:
    with open(_SGLANG_FLAGS_JSON, encoding="utf-8") as f:
        table = json.load(f)["flags"]
    names = set(table)
    for spec in table.values():
        names.update(spec.get("aliases") or [])
    return names


def unrecognized(groups: List[str], known: Optional[set] = None) -> List[str]:
    """The flags among ``groups`` (:func:`split_ignored`'s) that SGLang's argparse would refuse:
    neither an option string of its table nor an unambiguous prefix of one (argparse's
    ``allow_abbrev``); a bare value token that belongs to no flag is refused too."""
    known = _sglang_option_strings() if known is None else known
    bad = []
    for group in groups:
        tok = group.split(" ", 1)[0]
        name = tok.split("=", 1)[0]
        if not name.startswith("-"):
            bad.append(group)
        elif name not in known and len([k for k in known if k.startswith(name)]) != 1:
            bad.append(group)
    return bad


def split_ignored(extra: List[str]) -> List[str]:
    """Group unknown argv tokens into flags: `--flag`, `--flag value`, `--flag=value`."""
    groups: List[str] = []
    i = 0
    while i < len(extra):
        tok = extra[i]
        if tok.startswith("-") and "=" not in tok and i + 1 < len(extra) and not extra[i + 1].startswith("--"):
            groups.append(f"{tok} {extra[i + 1]}")
            i += 2
        else:
            groups.append(tok)
            i += 1
    return groups


def process_launch_command() -> str:
    """This process's command line, shell-quoted (from /proc/self/cmdline when available)."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            parts = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        parts = [sys.executable] + sys.argv
    return shlex.join(parts)


def _target_architecture(model_path: str) -> Optional[str]:
    path = os.path.join(model_path, "config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        archs = json.load(f).get("architectures") or [None]
    return archs[0]


def _auto_choose_speculative_params(model_arch: Optional[str]) -> Tuple[int, int, int]:
    """(steps, topk, num_draft_tokens) chosen from the TARGET architecture (SGLang 0.5.23,
    arg_groups/speculative_hook.py `_auto_choose_speculative_params`, the cases that matter here)."""
    if model_arch in ["LlamaForCausalLM"]:
        return (5, 4, 8)
    return (3, 1, 4)


def prepare_server_args(argv: List[str]) -> ServerArgs:
    """Parse argv and apply SGLang's speculative rules. argparse errors exit 2; rule violations
    raise `ServerArgsError` (message meant for the user)."""
    parser = build_parser()
    ns, extra = parser.parse_known_args(argv)
    args = ServerArgs(**vars(ns))
    args.ignored_args = split_ignored(extra)
    refused = unrecognized(args.ignored_args)
    if refused:
        # what SGLang 0.5.23's argparse prints before exiting 2 (launch_server.py: parse_args)
        raise ServerArgsError(f"unrecognized arguments: {' '.join(refused)}")
    args.launch_command = process_launch_command()
    if args.tokenizer_path is None:
        args.tokenizer_path = args.model_path
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    if not os.path.isdir(args.model_path):
        raise ServerArgsError(f"--model-path {args.model_path!r} is not a directory")

    try:
        algo = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
    except ValueError as e:
        raise ServerArgsError(str(e)) from e
    if algo.is_none():
        return args
    args.speculative_algorithm = algo.name
    if not algo.is_eagle():
        raise ServerArgsError(
            f"--speculative-algorithm {algo.name} is not implemented by the sandbox "
            "(EAGLE, EAGLE3 and NEXTN only)"
        )
    if args.speculative_draft_model_path is None:
        raise ServerArgsError("--speculative-draft-model-path is required for EAGLE / EAGLE3 in the sandbox")
    if not os.path.isdir(args.speculative_draft_model_path):
        raise ServerArgsError(f"--speculative-draft-model-path {args.speculative_draft_model_path!r} is not a directory")

    if args.speculative_num_steps is None:
        if not (args.speculative_eagle_topk is None and args.speculative_num_draft_tokens is None):
            # SGLang 0.5.23 has a bare `assert` here; the sandbox says what it means.
            raise ServerArgsError(
                "AssertionError: --speculative-eagle-topk and --speculative-num-draft-tokens must be "
                "unset when --speculative-num-steps is unset"
            )
        steps, topk, draft_tokens = _auto_choose_speculative_params(_target_architecture(args.model_path))
        args.speculative_num_steps = steps
        args.speculative_eagle_topk = topk
        args.speculative_num_draft_tokens = draft_tokens
    if args.speculative_eagle_topk is None:
        args.speculative_eagle_topk = 1
    if args.speculative_num_draft_tokens is None:
        args.speculative_num_draft_tokens = args.speculative_num_steps + 1

    if (
        args.speculative_eagle_topk == 1
        and args.speculative_num_draft_tokens != args.speculative_num_steps + 1
    ):
        logger.warning(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
        )
        args.speculative_num_draft_tokens = args.speculative_num_steps + 1
    if args.speculative_eagle_topk > 1:
        raise ServerArgsError(
            f"speculative_eagle_topk={args.speculative_eagle_topk}: the sandbox implements chain drafting only "
            "(topk == 1). Pass --speculative-eagle-topk 1 (and --speculative-num-steps N "
            "--speculative-num-draft-tokens N+1); with --speculative-num-steps unset, SGLang picks "
            "(5, 4, 8) for a LlamaForCausalLM target, which is tree drafting."
        )
    return args
