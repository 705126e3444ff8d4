"""Which EAGLE worker a server of the release runs for EAGLE/EAGLE3, read from the release's source:
:func:`eagle_worker` -> :class:`WorkerChoice` (``EAGLEWorker`` in ``srt/speculative/eagle_worker.py``
or ``EAGLEWorkerV2`` in ``eagle_worker_v2.py``; with both, 0.5.4 … 0.5.12, from the overlap-schedule
switches in ``server_args.py``, ``SGLANG_ENABLE_SPEC_V2`` and the launch flags), and
:func:`server_worker_inputs` (the running server's environment and argument tokens that choice
reads). The map's draft-worker entries are read in the worker chosen here.

Imports: :mod:`.ast_tools`, :mod:`workbench.engine.launch`, :mod:`workbench.engine.locate` and
:mod:`workbench.engine.source`; nothing else of this package.
"""

from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from workbench.engine.codepath.ast_tools import _seg
from workbench.engine.launch import LaunchCommand
from workbench.engine.locate import read_environ
from workbench.engine.source import EngineSource

WORKER_V1 = ("EAGLEWorker", "srt/speculative/eagle_worker.py")
WORKER_V2 = ("EAGLEWorkerV2", "srt/speculative/eagle_worker_v2.py")
SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"
#: Where releases pick the worker class and turn the overlap schedule off under speculative
#: decoding (SGLang 0.5.4 ``managers/scheduler.py`` ``launch_draft_worker``; 0.5.9 … 0.5.12
#: ``speculative/spec_info.py`` ``create_worker``; the overlap switch in ``server_args.py``).
_SELECTOR_FILES = ("srt/speculative/spec_info.py", "srt/managers/scheduler.py")
_SERVER_ARGS_FILES = ("srt/server_args.py", "srt/arg_groups/speculative_hook.py")


@dataclass(frozen=True)
class WorkerChoice:
    """The EAGLE worker class a server of this release runs for EAGLE/EAGLE3, read from the
    release's source: ``cls`` (``EAGLEWorker`` / ``EAGLEWorkerV2``), ``file`` (relative to the
    package root), ``why`` (the reasons, in words, with file:line), ``evidence`` (the file:line
    of each statement the choice rests on), ``default``: the class with no environment and no
    flag (what the release runs out of the box), ``other``: the other worker's file when the
    release has both (its entries are never taken for this one's)."""

    cls: str
    file: str
    why: str
    evidence: tuple[str, ...] = ()
    default: Optional[str] = None
    other: Optional[str] = None

    def to_dict(self) -> dict:
        return {"cls": self.cls, "file": self.file, "why": self.why, "evidence": list(self.evidence),
                "default": self.default, "other": self.other}


def _env_bool(value: str) -> Optional[bool]:
    """SGLang's ``EnvBool.parse`` (0.5.5 … 0.5.12 ``srt/environ.py``): ``true/1/yes/y`` and
    ``false/0/no/n`` in any case; ``None`` for anything else (the server raises ``ValueError``)."""
    v = value.strip().lower()
    if v in ("true", "1", "yes", "y"):
        return True
    if v in ("false", "0", "no", "n"):
        return False
    return None


def _assigns_overlap_off(stmts: Sequence[ast.stmt]) -> Optional[ast.Assign]:
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value is True and any(
                    isinstance(t, ast.Attribute) and t.attr == "disable_overlap_schedule" for t in n.targets):
                return n
    return None


def _overlap_switches(src: EngineSource) -> list[tuple[str, str, int, bool]]:
    """``(kind, rel, line, off_when_true)`` of each ``if`` in the server-args files that sets
    ``disable_overlap_schedule = True`` on a test of the spec-v2 environment variable
    (``kind="env"``), of ``enable_beta_spec`` (``"flag"``) or of ``speculative_eagle_topk``
    (``"topk"``); ``off_when_true``: the assignment is in the branch taken when the tested value
    is true (else when it is false). ``line``: the assignment's."""
    out = []
    for rel in _SERVER_ARGS_FILES:
        tree = src.tree(rel)
        if tree is None:
            continue
        text = src.read(rel) or ""
        for node in ast.walk(tree):
            if not isinstance(node, ast.If):
                continue
            test = _seg(text, node.test)
            kind = ("env" if SPEC_V2_ENV in test else "flag" if "enable_beta_spec" in test
                    else "topk" if "speculative_eagle_topk" in test and ">" in test else None)
            if kind is None:
                continue
            token = {"env": SPEC_V2_ENV, "flag": "enable_beta_spec", "topk": "speculative_eagle_topk"}[kind]
            negated = any(isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not) and token in _seg(text, n.operand)
                          for n in ast.walk(node.test))
            for branch, taken_when_true in ((node.body, True), (node.orelse, False)):
                direct = [s for s in branch if not isinstance(s, ast.If)]  # not a nested test's branch
                hit = _assigns_overlap_off(direct)
                if hit is not None:
                    out.append((kind, rel, hit.lineno, taken_when_true != negated))
    return out


def _selector(src: EngineSource) -> Optional[str]:
    """``rel:line`` of the statement that picks ``EAGLEWorkerV2`` on the overlap schedule (an
    ``if`` / conditional expression testing an ``*overlap*`` name), if the release has one."""
    for rel in _SELECTOR_FILES:
        tree = src.tree(rel)
        if tree is None:
            continue
        text = src.read(rel) or ""
        for node in ast.walk(tree):
            if isinstance(node, (ast.If, ast.IfExp)) and "overlap" in _seg(text, node.test):
                body = node.body if isinstance(node, ast.If) else [node.body]
                if any("EAGLEWorkerV2" in _seg(text, b) for b in body):
                    return f"{rel}:{node.lineno}"
    return None


def _env_default(src: EngineSource) -> Optional[tuple[bool, str]]:
    """The spec-v2 variable's default (``SGLANG_ENABLE_SPEC_V2 = EnvBool(X)`` in
    ``srt/environ.py``) and its ``rel:line``; ``None`` when the release declares no such variable."""
    tree = src.tree("srt/environ.py")
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == SPEC_V2_ENV for t in node.targets) \
                and isinstance(node.value, ast.Call) and node.value.args \
                and isinstance(node.value.args[0], ast.Constant) and isinstance(node.value.args[0].value, bool):
            return node.value.args[0].value, f"srt/environ.py:{node.lineno}"
    return None


def _flag_value(args: Sequence[str], flag: str) -> Optional[str]:
    """The value written for ``flag`` (``--flag V`` / ``--flag=V``; ``""`` for a bare flag), last wins."""
    value = None
    for i, tok in enumerate(args):
        if tok == flag:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            value = "" if nxt.startswith("--") else nxt
        elif tok.startswith(flag + "="):
            value = tok.split("=", 1)[1]
    return value


def eagle_worker(src: EngineSource, *, env: Optional[Mapping[str, str]] = None,
                 launch_args: Optional[Sequence[str]] = None) -> Optional[WorkerChoice]:
    """The EAGLE worker a server of the engine ``src`` runs for EAGLE/EAGLE3, read from its source.

    ``env``: the server's environment (``/proc/PID/environ``, :func:`workbench.engine.locate.read_environ`,
    with the launch command's ``VAR=value`` prefix over it); ``None`` or a mapping without the
    variable: the release's default. ``launch_args``: the launch command's argument tokens
    (``--disable-overlap-schedule``, ``--enable-beta-spec``, ``--speculative-eagle-topk N`` are read).

    How releases choose, as their source says: a release with only ``eagle_worker.py`` (≤ 0.5.3)
    or only ``eagle_worker_v2.py`` (0.5.15 …) runs that one. With both (0.5.4 … 0.5.12) the V2
    worker runs when the overlap schedule is on (``EAGLEWorkerV2 if self.enable_overlap`` /
    ``create_worker``), and ``server_args.py`` turns it off under speculative decoding: without
    ``--enable-beta-spec`` (0.5.4), when ``SGLANG_ENABLE_SPEC_V2`` is false (0.5.5 … 0.5.12; its
    default ``EnvBool(False)`` until 0.5.10, ``EnvBool(True)`` in 0.5.12), for
    ``--speculative-eagle-topk`` > 1 where an ``if`` says so (0.5.12), or with
    ``--disable-overlap-schedule``. ``None`` when the release has neither file. Box errors propagate."""
    has1, has2 = src.read(WORKER_V1[1]) is not None, src.read(WORKER_V2[1]) is not None
    if not has1 and not has2:
        return None
    if not has2:
        return WorkerChoice(*WORKER_V1, f"the release has no {WORKER_V2[1]}: every EAGLE/EAGLE3 server runs "
                                        f"{WORKER_V1[0]}", (), WORKER_V1[0])
    if not has1:
        return WorkerChoice(*WORKER_V2, f"the release has no {WORKER_V1[1]}: every EAGLE/EAGLE3 server runs "
                                        f"{WORKER_V2[0]} (with or without the overlap schedule)", (), WORKER_V2[0])
    args = list(launch_args or ())
    env = dict(env or {})
    evidence: list[str] = []
    sel = _selector(src)
    if sel:
        evidence.append(sel)
    reasons: list[str] = []
    on = on_default = True
    switches = _overlap_switches(src)
    env_sw = [s for s in switches if s[0] == "env"]
    flag_sw = [s for s in switches if s[0] == "flag"]
    topk_sw = [s for s in switches if s[0] == "topk"]
    if env_sw:
        default = _env_default(src)
        dflt = default[0] if default else False
        evidence += ([default[1]] if default else []) + [f"{r}:{n}" for _, r, n, _ in env_sw]
        raw = env.get(SPEC_V2_ENV)
        parsed = _env_bool(raw) if raw is not None else None
        value = parsed if parsed is not None else dflt
        where = f"{env_sw[0][1]}:{env_sw[0][2]}"
        off_when_true = env_sw[0][3]
        on_default = dflt != off_when_true
        on = value != off_when_true
        if raw is None:
            said = f"{SPEC_V2_ENV} is not set (default {dflt} at {default[1] if default else 'srt/environ.py'})"
        elif parsed is None:
            said = f"{SPEC_V2_ENV}={raw!r} is no boolean (the server refuses it; default {dflt} used here)"
        else:
            said = f"{SPEC_V2_ENV}={raw} in the server's environment"
        reasons.append(f"{said}: {where} turns the overlap schedule {'on' if on else 'off'}")
    elif flag_sw:
        evidence += [f"{r}:{n}" for _, r, n, _ in flag_sw]
        given = _flag_value(args, "--enable-beta-spec") is not None
        where = f"{flag_sw[0][1]}:{flag_sw[0][2]}"
        on_default = False
        on = given
        reasons.append(("--enable-beta-spec given" if given else "no --enable-beta-spec") +
                       f": {where} {'keeps' if on else 'turns'} the overlap schedule {'on' if on else 'off'}")
    if on and topk_sw:
        topk = _flag_value(args, "--speculative-eagle-topk")
        if topk and topk.isdigit() and int(topk) > 1:
            on = False
            evidence += [f"{r}:{n}" for _, r, n, _ in topk_sw]
            reasons.append(f"--speculative-eagle-topk {topk} > 1: {topk_sw[0][1]}:{topk_sw[0][2]} turns the overlap "
                           "schedule off")
    if _flag_value(args, "--disable-overlap-schedule") is not None:
        on = False
        reasons.append("--disable-overlap-schedule given")
    cls, file = WORKER_V2 if on else WORKER_V1
    other = WORKER_V1[1] if on else WORKER_V2[1]
    pick = f"{sel} runs {WORKER_V2[0]} only with the overlap schedule" if sel else \
        f"{WORKER_V2[0]} runs only with the overlap schedule"
    why = "; ".join(reasons + [pick]) + f": this server runs {cls}"
    return WorkerChoice(cls, file, why, tuple(dict.fromkeys(evidence)), (WORKER_V2 if on_default else WORKER_V1)[0],
                        other)


def server_worker_inputs(box, engine, *, launch: Optional[LaunchCommand] = None,
                         timeout: float = 30) -> tuple[Optional[dict], Optional[list[str]]]:
    """``(env, launch_args)`` for :func:`eagle_worker` / :func:`code_path_map` from a located
    engine (:class:`workbench.engine.locate.EngineInfo`): the running server's own environment
    (``/proc/PID/environ`` on the box, :func:`workbench.engine.locate.read_environ`) with
    ``launch``'s ``VAR=value`` prefix over it, and the argument tokens of ``launch``, else of the
    server's command line (``engine.launch``). ``(None, None)`` when neither is known (the
    release's default worker is then used). An environment that cannot be read (another user's
    process) counts as unknown; box errors other than that propagate."""
    env: Optional[dict] = None
    pid = getattr(engine, "server_pid", None)
    if pid:
        env = read_environ(box, pid, timeout=timeout)
    args: Optional[list[str]] = None
    if launch is not None:
        env = {**(env or {}), **dict(launch.env)}
        args = list(launch.arg_tokens)
    elif getattr(engine, "launch", None):
        try:
            args = shlex.split(engine.launch)
        except ValueError:  # an unbalanced quote in the recorded command: its flags are not read
            args = None
    return env, args
