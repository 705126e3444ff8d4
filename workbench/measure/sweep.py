"""Sweeps of the speculative settings: one server launch per (steps, topk, draft tokens) setting,
plus a no-speculation baseline, each measured over the same prompts; accept length, tokens/s and
speedup against the baseline as a tidy table (JSON, CSV) and plotly figures.

The sweep is a :class:`workbench.session.BoxSession`: it stops the server it finds on the port
(journalled first), launches each setting with that server's command line, working directory and
environment (only the ``--speculative-*`` flags changed; the baseline drops them all), and puts the
original back at the end, also when interrupted (``workbench restore``). A setting the engine
refuses to start (e.g. ``topk > 1`` on the sandbox box, which drafts chains only) is a row with its
error and the server log's last lines; the sweep goes on.

SGLang 0.5.23 facts used (``srt/arg_groups/speculative_hook.py``): with ``topk == 1`` the engine
forces ``num_draft_tokens = steps + 1`` (so ``auto`` means that); unset steps means the engine picks
all three from the target architecture.
"""

from __future__ import annotations

import csv
import html
import io
import itertools
import json
import posixpath
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from remote.errors import RemoteError
from workbench.engine.launch import LaunchCommand
from workbench.errors import AcceptanceError, DiagnosisError, GpusHeld, LaunchRefused, SweepError
from workbench.measure.generate import measure_generate
from workbench.measure.prompts import load_prompts
from workbench.redact import REDACTOR
from workbench.sandbox_box import sandbox_prompts_path
from workbench.session import BoxSession, open_box, restore_box
from workbench.session.box_session import check_run_parameters, sandbox_default_launch
from workbench.session.inventory import serves_sandbox_target
from workbench.session.watchdog import WATCHDOG_AFTER_S

__all__ = ["SpecSetting", "SweepError", "parse_grid", "setting_launch", "SweepRow", "SweepResult", "SweepRun",
           "per_position", "compare_settings", "break_token_map", "rank_rows", "RANK_FIGURES", "ACCEPT_LENGTH_TIE"]

SPEC_FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")

#: What may decide the best row: a sweep of the settings ranks by ``tokens_per_s`` (more draft tokens
#: always raise accept length; what they cost in verify time only throughput shows); a comparison of
#: drafts by ``accept_length`` (the drafts' quality on the same target and settings, tokens per verify
#: step: it does not move with the box's load, which tokens/s on a shared box does).
RANK_FIGURES = ("tokens_per_s", "accept_length")
#: Accept lengths within this many tokens per verify step of the best are a tie (equal at the two
#: decimals the report prints): among the tied rows tokens/s decides.
ACCEPT_LENGTH_TIE = 0.005


@dataclass(frozen=True)
class SpecSetting:
    """One point of the grid: ``steps`` / ``topk`` / ``draft_tokens`` (``--speculative-num-steps``,
    ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``; ``None`` keeps the launch
    command's), or ``baseline`` (no speculative decoding: every ``--speculative-*`` flag dropped);
    ``draft_path`` replaces ``--speculative-draft-model-path`` (comparing drafts); ``name`` the label."""

    steps: Optional[int] = None
    topk: Optional[int] = None
    draft_tokens: Optional[int] = None
    baseline: bool = False
    draft_path: Optional[str] = None
    name: Optional[str] = None

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.baseline:
            return "no speculation"
        return f"steps={self.steps} topk={self.topk} draft_tokens={self.draft_tokens}"


def parse_grid(text: str | dict, *, include_baseline: bool = True) -> list[SpecSetting]:
    """The settings of a grid: ``"steps:1,3,5 topk:1 draft_tokens:auto"`` (``=`` works too, but a
    papermill parameters cell cannot hold it; or the same as a dict of lists). The cartesian product, in that order; ``draft_tokens=auto`` (the default) is
    ``steps + 1`` for ``topk == 1`` (what SGLang forces) and ``steps * topk + 1`` otherwise (a full
    tree's size would be larger; give numbers to control it); settings with ``draft_tokens >
    steps * topk + 1`` are dropped (the engine cannot fill them). The baseline comes first.
    Raises :class:`SweepError` naming the bad key or value."""
    if isinstance(text, dict):
        spec = {k: (v if isinstance(v, (list, tuple)) else [v]) for k, v in text.items()}
    else:
        spec = {}
        for part in re.split(r"[\s;]+", text.strip()):
            if not part:
                continue
            m = re.fullmatch(r"(\w+)[=:](.+)", part)
            if not m:
                raise SweepError(f"grid part {part!r} is not key:v1,v2 (keys: steps, topk, draft_tokens)")
            key, values = m.group(1), m.group(2)
            if key in spec:
                raise SweepError(f"grid key {key!r} given twice; list its values once ({key}:1,2,3)")
            if any(not v for v in values.split(",")):
                raise SweepError(f"grid {key}:{values} has an empty value")
            spec[key] = values.split(",")
    unknown = set(spec) - {"steps", "topk", "draft_tokens"}
    if unknown:
        raise SweepError(f"unknown grid key(s) {sorted(unknown)} (keys: steps, topk, draft_tokens)")

    def ints(key: str, default: list) -> list:
        out = []
        for v in spec.get(key, default):
            if v == "auto" and key == "draft_tokens":
                out.append("auto")
                continue
            try:
                n = int(v)
            except (TypeError, ValueError):
                raise SweepError(f"grid {key}={v!r} is not a positive integer") from None
            if n < 1:
                raise SweepError(f"grid {key}={n} must be >= 1")
            out.append(n)
        return out

    settings = [SpecSetting(baseline=True)] if include_baseline else []
    for steps, topk, dt in itertools.product(ints("steps", []), ints("topk", [1]), ints("draft_tokens", ["auto"])):
        n = (steps + 1 if topk == 1 else steps * topk + 1) if dt == "auto" else dt
        if n > steps * topk + 1:
            continue
        s = SpecSetting(steps, topk, n)
        if s not in settings:
            settings.append(s)
    if not any(not s.baseline for s in settings):
        raise SweepError("the grid has no speculative setting: give steps (e.g. steps:1,3,5)")
    return settings


def _vllm_setting_launch(launch: LaunchCommand, setting: SpecSetting) -> LaunchCommand:
    """:func:`setting_launch` for a vLLM command (``launch.engine == "vllm"``): vLLM drafts a chain of
    ``num_speculative_tokens`` (k) tokens per verify step (vLLM 0.32.0 ``config/speculative.py``), so
    ``steps`` is k, ``draft_tokens`` must be k + 1 (SGLang's D; ``auto`` is) and ``topk`` 1; the draft
    is ``--speculative-config``'s ``model``; the baseline drops ``--speculative-config``. Raises
    :class:`SweepError` for a setting vLLM has no equivalent of."""
    if setting.baseline:
        for flag in [f for f in launch.flags() if f.startswith("--speculative-config")]:
            launch = launch.without_flag(flag)
        return launch
    if launch.speculative_config is None:
        raise SweepError("the vLLM launch command has no --speculative-config: nothing to sweep")
    if setting.topk not in (None, 1):
        raise SweepError(f"{setting.label}: topk {setting.topk}: vLLM drafts a chain (num_speculative_tokens); "
                         "sweep topk:1 on vLLM")
    k = setting.steps
    if k is None and setting.draft_tokens is not None:
        k = setting.draft_tokens - 1
    if k is not None and setting.draft_tokens is not None and setting.draft_tokens != k + 1:
        raise SweepError(f"{setting.label}: draft_tokens {setting.draft_tokens} != steps + 1: on vLLM one verify step "
                         f"checks num_speculative_tokens + 1 tokens (give draft_tokens:auto)")
    if k is not None:
        if k < 1:
            raise SweepError(f"{setting.label}: num_speculative_tokens must be >= 1, got {k}")
        launch = launch.with_speculative(num_speculative_tokens=k)
    if setting.draft_path is not None:
        launch = launch.with_draft_model(setting.draft_path)
    return launch


def setting_launch(launch: LaunchCommand, setting: SpecSetting) -> LaunchCommand:
    """``launch`` with the setting's three flags (replaced or added), or with every
    ``--speculative-*`` flag removed for the baseline; a vLLM command (``engine == "vllm"``) through
    :func:`_vllm_setting_launch` (``--speculative-config``'s ``num_speculative_tokens`` and
    ``model``). Raises :class:`SweepError` when a speculative setting is asked of a command without
    ``--speculative-algorithm`` (vLLM: ``--speculative-config``)."""
    if getattr(launch, "engine", None) == "vllm":
        return _vllm_setting_launch(launch, setting)
    if setting.baseline:
        for flag in [f for f in launch.flags() if f.startswith("--speculative-")]:
            launch = launch.without_flag(flag)
        return launch
    if not launch.get("--speculative-algorithm"):
        raise SweepError("the launch command has no --speculative-algorithm: nothing to sweep")
    for flag, value in zip(SPEC_FLAGS, (setting.steps, setting.topk, setting.draft_tokens)):
        if value is not None:
            launch = launch.with_flag(flag, str(value))
    if setting.draft_path is not None:
        launch = launch.with_flag("--speculative-draft-model-path", setting.draft_path)
    return launch


@dataclass
class SweepRow:
    """One setting's result. Accept length: SGLang's (Σ completion tokens / Σ verify steps, bonus
    included); ``accepted_drafts_per_step`` = Σ correct drafts / Σ verify steps; ``tau`` = 1 +
    that (the EAGLE papers' tokens per draft-verify cycle, SGLang's server-side number); ``tokens_per_s``
    = Σ completion tokens / Σ request wall seconds (requests sent one at a time, warm-up
    excluded); ``speedup`` = tokens_per_s / the baseline's. ``histogram``: summed
    ``spec_correct_drafts_histogram`` (index k = verify steps that accepted exactly k drafts);
    ``per_position[k-1]`` = P(at least k drafts accepted in a verify step), k = 1 … draft tokens − 1.
    ``ok`` False with ``error`` (and ``log_tail``) when the server did not start or a request failed;
    ``refused``: the doctor's findings (dicts) when the launch guard refused the setting's launch
    (never made: the doctor says it would not start), else ``None``."""

    label: str
    baseline: bool
    steps: Optional[int]
    topk: Optional[int]
    draft_tokens: Optional[int]
    ok: bool
    accept_length: Optional[float] = None
    accept_rate: Optional[float] = None
    accepted_drafts_per_step: Optional[float] = None
    tau: Optional[float] = None
    tokens_per_s: Optional[float] = None
    speedup: Optional[float] = None
    completion_tokens: Optional[int] = None
    verify_steps: Optional[int] = None
    requests: Optional[int] = None
    healthy_after_s: Optional[float] = None
    launch_command: str = ""
    error: Optional[str] = None
    log_tail: list[str] = field(default_factory=list)
    histogram: Optional[list[int]] = None
    per_position: Optional[list[float]] = None
    draft_path: Optional[str] = None
    refused: Optional[list[dict]] = None

    def to_dict(self) -> dict:
        """The row as plain JSON, secrets redacted (its launch command, its log tail)."""
        return REDACTOR.obj(asdict(self))


CSV_COLUMNS = ("label", "baseline", "steps", "topk", "draft_tokens", "draft_path", "ok", "accept_length",
               "accept_rate", "accepted_drafts_per_step", "tau", "tokens_per_s", "speedup", "completion_tokens",
               "verify_steps", "requests", "per_position", "histogram", "healthy_after_s", "error", "launch_command")


def rank_rows(rows: Sequence["SweepRow"], rank_by: str = "tokens_per_s") -> tuple[list["SweepRow"], Optional[str], str]:
    """Rank the measured speculative rows (``ok``, not the baseline, with the figure measured) best
    first. Returns ``(ranked, decided_by, reason)``: ``decided_by`` is the figure that picked the
    first row — ``rank_by``, or ``"tokens_per_s"`` when ranking by accept length and the best rows'
    accept lengths tie (within :data:`ACCEPT_LENGTH_TIE` tokens per verify step) — or ``None`` when no
    row was measured; ``reason`` says it in words with both figures of the first two rows.

    ``rank_by``: one of :data:`RANK_FIGURES` (``tokens_per_s``: highest tokens/s first;
    ``accept_length``: highest accept length first, ties by tokens/s). Raises ``ValueError`` for
    another figure."""
    if rank_by not in RANK_FIGURES:
        raise ValueError(f"rank_by must be one of {', '.join(RANK_FIGURES)}, got {rank_by!r}")
    measured = [r for r in rows if r.ok and not r.baseline and getattr(r, rank_by) is not None]
    if rank_by == "tokens_per_s":
        measured = [r for r in measured if r.tokens_per_s]
    if not measured:
        return [], None, "no setting was measured: no best"

    def tps(r: "SweepRow") -> float:
        return r.tokens_per_s if r.tokens_per_s is not None else float("-inf")

    if rank_by == "tokens_per_s":
        ranked = sorted(measured, key=tps, reverse=True)
        decided = "tokens_per_s"
    else:
        by_accept = sorted(measured, key=lambda r: (r.accept_length, tps(r)), reverse=True)
        top = by_accept[0].accept_length
        tied = [r for r in by_accept if top - r.accept_length <= ACCEPT_LENGTH_TIE]
        ranked = sorted(tied, key=tps, reverse=True) + [r for r in by_accept if r not in tied]
        decided = "tokens_per_s" if len(tied) > 1 else "accept_length"

    def figures(r: "SweepRow") -> str:
        al = f"accept length {r.accept_length:.3f}" if r.accept_length is not None else "accept length not measured"
        return al + (f", {r.tokens_per_s:.1f} tokens/s" if r.tokens_per_s is not None else ", tokens/s not measured")

    best = ranked[0]
    if len(ranked) == 1:
        reason = f"{best.label} is the only one measured ({figures(best)})"
    elif decided == "accept_length":
        reason = (f"{best.label} by accept length, tokens per verify step ({figures(best)}; {ranked[1].label}: "
                  f"{figures(ranked[1])}); tokens/s is shown beside it and did not decide")
    elif rank_by == "accept_length":
        reason = (f"{best.label} by tokens/s: the accept lengths tie within {ACCEPT_LENGTH_TIE:g} tokens per verify "
                  f"step ({figures(best)}; {ranked[1].label}: {figures(ranked[1])})")
    else:
        reason = f"{best.label} by tokens/s ({figures(best)}; {ranked[1].label}: {figures(ranked[1])})"
    return ranked, decided, reason


@dataclass
class SweepResult:
    """The sweep's table (``rows``, baseline first) and what it ran on. ``rank_by``: the figure
    that picks :attr:`best` (:data:`RANK_FIGURES`: a sweep of the settings ``tokens_per_s``, a
    comparison of drafts ``accept_length``, ties broken by tokens/s: :func:`rank_rows`)."""

    rows: list[SweepRow]
    host: str
    port: int
    prompts: int
    max_new_tokens: int
    warmup: int
    base_launch: str
    duration_s: float = 0.0
    restore: Optional[dict] = None
    notes: list[str] = field(default_factory=list)
    launch_guard: Optional[dict] = None
    rank_by: str = "tokens_per_s"

    @property
    def baseline(self) -> Optional[SweepRow]:
        return next((r for r in self.rows if r.baseline and r.ok), None)

    @property
    def best(self) -> Optional[SweepRow]:
        """The best measured speculative row by :attr:`rank_by` (:func:`rank_rows`), or ``None``."""
        ranked, _, _ = rank_rows(self.rows, self.rank_by)
        return ranked[0] if ranked else None

    def ranking(self) -> dict:
        """How :attr:`best` was picked: ``{"rank_by", "decided_by", "reason", "order"}`` — the
        figure asked to rank by, the figure that decided (``tokens_per_s`` when accept lengths tied;
        ``None`` when nothing was measured), the reason in words (both figures of the first two
        rows) and the measured rows' labels, best first."""
        ranked, decided, reason = rank_rows(self.rows, self.rank_by)
        return {"rank_by": self.rank_by, "decided_by": decided, "reason": reason, "order": [r.label for r in ranked]}

    def check(self) -> None:
        """Raise :class:`SweepError` when no speculative setting was measured (every one failed to
        start or to answer), naming each failure: a run that measured nothing must not look done."""
        spec = [r for r in self.rows if not r.baseline]
        if spec and not any(r.ok for r in spec):
            raise SweepError("no setting could be measured: " + "; ".join(f"{r.label}: {r.error}" for r in spec))

    def to_dict(self) -> dict:
        """The result as plain JSON, secrets redacted (:mod:`workbench.redact`: launch commands,
        log tails, the restore's actions)."""
        return REDACTOR.obj({"rows": [r.to_dict() for r in self.rows], "host": self.host, "port": self.port,
                "prompts": self.prompts, "max_new_tokens": self.max_new_tokens, "warmup": self.warmup,
                "base_launch": self.base_launch, "duration_s": self.duration_s, "restore": self.restore,
                "best": self.best.label if self.best else None, "best_by": self.ranking()["decided_by"],
                "ranking": self.ranking(), "notes": list(self.notes),
                "launch_guard": self.launch_guard})

    def to_csv(self) -> str:
        """The table as CSV (one row per setting, :data:`CSV_COLUMNS`)."""
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for r in self.rows:
            d = REDACTOR.obj(r.to_dict())
            for key in ("per_position", "histogram"):  # lists as JSON text in one cell
                d[key] = json.dumps(d[key]) if d[key] is not None else None
            writer.writerow(d)
        return buf.getvalue()

    def write(self, report_dir: str | Path, name: str = "measure_acceptance") -> dict[str, Path]:
        """Write ``NAME.json`` and ``NAME.csv`` into ``report_dir``; return their paths."""
        out = Path(report_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / f"{name}.json", "csv": out / f"{name}.csv"}
        paths["json"].write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        paths["csv"].write_text(self.to_csv())
        return paths

    def figures(self) -> dict[str, Any]:
        """Plotly figures: accept length against draft tokens (a line per steps/topk), and tokens/s
        per setting with the baseline as a line and the speedup in the hover."""
        import plotly.graph_objects as go

        spec = [r for r in self.rows if r.ok and not r.baseline]
        fig_al = go.Figure()
        if any(r.draft_tokens is None for r in spec):  # a comparison of drafts: one bar per draft
            fig_al.add_trace(go.Bar(x=[r.label for r in spec], y=[r.accept_length for r in spec],
                                    text=[f"{r.accept_length:.2f}" if r.accept_length else "" for r in spec]))
            spec = []
        for topk in sorted({r.topk for r in spec}):
            rows = sorted([r for r in spec if r.topk == topk], key=lambda r: (r.draft_tokens, r.steps))
            fig_al.add_trace(go.Scatter(x=[r.draft_tokens for r in rows], y=[r.accept_length for r in rows],
                                        mode="lines+markers", name=f"topk={topk}",
                                        text=[r.label for r in rows], hovertemplate="%{text}<br>accept length %{y:.2f}"))
        fig_al.update_layout(title="Accept length (tokens per verify step, bonus included) by draft tokens",
                             xaxis_title="--speculative-num-draft-tokens", yaxis_title="accept length",
                             template="plotly_white")
        fig_tps = go.Figure(go.Bar(x=[r.label for r in self.rows if r.ok],
                                   y=[r.tokens_per_s for r in self.rows if r.ok],
                                   text=[(f"{r.speedup:.2f}x" if r.speedup else "") for r in self.rows if r.ok],
                                   marker_color=["#8c959f" if r.baseline else "#0969da" for r in self.rows if r.ok]))
        base = self.baseline
        if base is not None and base.tokens_per_s:
            fig_tps.add_hline(y=base.tokens_per_s, line_dash="dot", annotation_text="no speculation")
        fig_tps.update_layout(title="Decode throughput per setting (speedup against no speculation)",
                              yaxis_title="tokens/s (one request at a time)", template="plotly_white")
        figs = {"accept_length": fig_al, "throughput": fig_tps}
        with_pos = [r for r in self.rows if r.ok and r.per_position]
        if with_pos:
            fig_pos = go.Figure()
            for r in with_pos:
                fig_pos.add_trace(go.Scatter(x=list(range(1, len(r.per_position) + 1)), y=r.per_position,
                                             mode="lines+markers", name=r.label))
            fig_pos.update_layout(title="Per-position acceptance: P(at least k drafts accepted in a verify step)",
                                  xaxis_title="draft position k", yaxis_title="probability", yaxis_range=[0, 1],
                                  template="plotly_white")
            figs["per_position"] = fig_pos
        return figs

    def _repr_html_(self) -> str:
        def cell(v: Any) -> str:
            if isinstance(v, float):
                return f"{v:.3f}"
            return html.escape("" if v is None else str(v))

        cols = ("label", "ok", "accept_length", "tau", "accepted_drafts_per_step", "accept_rate", "tokens_per_s",
                "speedup", "error")
        if self.rank_by == "accept_length":  # the deciding figure first, tokens/s beside it
            cols = ("label", "ok", "accept_length", "tokens_per_s", "tau", "accepted_drafts_per_step", "accept_rate",
                    "speedup", "error")
        from workbench.report.tables import scroll_box

        def align(c: str) -> str:  # numbers right-aligned, labels and errors left (JupyterLab right-aligns all)
            return "text-align:left" if c in ("label", "ok", "error") else "text-align:right"

        head = "".join(f"<th style='{align(c)}'>{c}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td style='{align(c)}'>{cell(getattr(r, c))}</td>" for c in cols) + "</tr>"
                       for r in self.rows)
        ranking = self.ranking()
        deciding = {"accept_length": "accept length", "tokens_per_s": "tokens/s"}
        best = (f"<p>Best: <b>{html.escape(ranking['order'][0])}</b>, decided by "
                f"<b>{deciding[ranking['decided_by']]}</b> — {html.escape(ranking['reason'])}.</p>"
                if ranking["decided_by"] else f"<p>{html.escape(ranking['reason'])}.</p>")
        return REDACTOR.text(best + scroll_box(f"<table><tr>{head}</tr>{body}</table>"))


class SweepRun(BoxSession):
    """A sweep on one box. Create with :meth:`start`, call :meth:`run`, end with :meth:`finish`
    (puts the box back as found; idempotent, also at interpreter exit)."""

    def __init__(self, box, inventory, journal, *, settings: Sequence[SpecSetting], prompts: list[dict],
                 max_new_tokens: int, warmup: int, server_start_timeout: float, report_dir: str | Path,
                 progress: bool | str = True, request_timeout: float = 300.0, force_launch: bool = False):
        super().__init__(box, inventory, journal, server_start_timeout=server_start_timeout,
                         request_timeout=request_timeout, force_launch=force_launch)
        self.settings = list(settings)
        self.prompts = prompts
        self.max_new_tokens = max_new_tokens
        self.warmup = warmup
        self.report_dir = Path(report_dir)
        self.progress = progress
        self.rows: list[SweepRow] = []
        self.started_at = time.monotonic()
        self.result: Optional[SweepResult] = None
        self.cleanup_dirs: list[str] = []  # directories on the box the run created (journalled; restore removes them)
        self.notes: list[str] = []
        self.rank_by = "tokens_per_s"  # what picks the best row (a comparison of drafts: accept_length)

    @classmethod
    def start(cls, *, host: str = "local", launch_command: str | None = None, port: int | None = None,
              grid: str | dict = "steps:1,2,3,4", include_baseline: bool = True, prompts: str | None = None,
              num_prompts: int | None = 8, max_new_tokens: int = 64, warmup: int = 1,
              server_start_timeout: float = 300.0, report_dir: str | Path = "reports",
              progress: bool | str = True, settings: Sequence[SpecSetting] | None = None,
              request_timeout: float = 300.0, force_launch: bool = False,
              engine: str | None = None, watchdog_after_s: float = WATCHDOG_AFTER_S) -> "SweepRun":
        """Connect, restore what an interrupted run left, find the server (``launch_command=None``:
        the one running on ``port``; with none, the embedded sandbox box with EAGLE3, or with
        ``engine="vllm"`` the sandbox box on vLLM's CPU build, method eagle3) and open the
        journal. ``grid``: see :func:`parse_grid`. ``prompts``: a JSONL path (default: the
        built-in prompts; on the sandbox box its own code prompts). ``settings``: an explicit list
        instead of ``grid`` (:func:`compare_settings` builds one per draft). ``request_timeout``:
        seconds each measured request may take. ``force_launch``: launch a setting even when the
        launch guard's doctor says it will not start (recorded in ``launch_guard``); otherwise such
        a setting is a row with ``refused`` and no launch. ``watchdog_after_s``: seconds of silence
        of the run's heartbeat after which its watchdog on the box restores the box
        (:mod:`workbench.session.watchdog`; 0: no watchdog). Raises
        :class:`SweepError`, ``DiagnosisError``, ``remote.errors.RemoteError``."""
        check_run_parameters(flags={"include_baseline": include_baseline}, counts={"max_new_tokens": max_new_tokens},
                             optional_counts={"num_prompts": num_prompts}, non_negative={"warmup": warmup},
                             seconds={"server_start_timeout": server_start_timeout,
                                      "request_timeout": request_timeout})
        settings = list(settings) if settings is not None else parse_grid(grid, include_baseline=include_baseline)
        # with no server running and no command given: the embedded sandbox box, working configuration
        box, inventory, journal = open_box(host, launch_command=launch_command, port=port,
                                           server_start_timeout=server_start_timeout,
                                           default_launch=sandbox_default_launch(engine, port, algorithm="EAGLE3"),
                                           watchdog_after_s=watchdog_after_s)
        try:
            for setting in settings:
                setting_launch(inventory.launch, setting)  # validate early
            prompt_set = _prompt_set(inventory, prompts, num_prompts)
        except BaseException:
            restore_box(box, server_start_timeout=server_start_timeout)  # close the journal just opened
            box.close()
            raise
        return cls(box, inventory, journal, settings=settings, prompts=prompt_set, max_new_tokens=max_new_tokens,
                   warmup=warmup, server_start_timeout=server_start_timeout, report_dir=report_dir,
                   progress=progress, request_timeout=request_timeout, force_launch=force_launch)

    @classmethod
    def compare(cls, *, host: str = "local", launch_command: str | None = None, port: int | None = None,
                draft_a: str | None = None, draft_b: str | None = None, include_baseline: bool = False,
                prompts: str | None = None, num_prompts: int | None = 8, max_new_tokens: int = 64, warmup: int = 1,
                server_start_timeout: float = 300.0, report_dir: str | Path = "reports",
                progress: bool | str = True, request_timeout: float = 300.0,
                force_launch: bool = False, engine: str | None = None,
                watchdog_after_s: float = WATCHDOG_AFTER_S) -> "SweepRun":
        """Two drafts on the same target and settings (everything but ``--speculative-draft-model-path``
        as the launch command has it). ``draft_a``: default the launch command's draft; ``draft_b``:
        default a copy of ``draft_a`` with its token map broken (:func:`break_token_map`, written
        under the box's state dir and removed by :meth:`finish`), which shows what a wrong ``d2t``
        does to acceptance. ``request_timeout``: seconds each measured request may take.
        ``force_launch``, ``engine``, ``watchdog_after_s``: as for :meth:`start`. The result's best draft is the one with
        the higher accept length (``rank_by="accept_length"``; accept lengths within
        :data:`ACCEPT_LENGTH_TIE` tie, and tokens/s decides between them), tokens/s shown beside
        it; the result says which figure decided (:meth:`SweepResult.ranking`). Raises :class:`SweepError`, ``DiagnosisError``,
        ``RemoteError``."""
        check_run_parameters(flags={"include_baseline": include_baseline}, counts={"max_new_tokens": max_new_tokens},
                             optional_counts={"num_prompts": num_prompts}, non_negative={"warmup": warmup},
                             seconds={"server_start_timeout": server_start_timeout,
                                      "request_timeout": request_timeout})
        box, inventory, journal = open_box(host, launch_command=launch_command, port=port,
                                           server_start_timeout=server_start_timeout,
                                           default_launch=sandbox_default_launch(engine, port, algorithm="EAGLE3"),
                                           watchdog_after_s=watchdog_after_s)
        cleanup: list[str] = []
        notes: list[str] = []
        try:
            vllm = getattr(inventory.launch, "engine", None) == "vllm"
            a = draft_a or (inventory.launch.draft_model if vllm else
                            inventory.resolved.get("--speculative-draft-model-path"))
            if not a:
                raise SweepError("the launch command names no " + ("--speculative-config model" if vllm else
                                                                   "--speculative-draft-model-path") + "; give draft_a")
            if draft_b is None:
                draft_b = f"{box.state_dir}/compare/{posixpath.basename(a.rstrip('/'))}-broken-token-map"
                box.run(["rm", "-rf", "--", draft_b], timeout=60)
                journal.add_created(draft_b)  # removed by finish, or by `workbench restore` after a kill
                cleanup.append(draft_b)
                info = break_token_map(box, a, draft_b, python=inventory.python)
                notes.append(f"draft B is a copy of draft A whose d2t maps the same target ids in a shuffled order "
                             f"({info['changed'][0]['moved']} of {info['changed'][0]['draft_vocab']} draft ids moved)")
                names = ("draft A (as given)", "draft B (token map shuffled)")
            else:
                names = (f"draft A: {posixpath.basename(a.rstrip('/'))}", f"draft B: {posixpath.basename(draft_b.rstrip('/'))}")
            algo = str((inventory.launch.speculative_method if vllm else inventory.launch.get("--speculative-algorithm"))
                       or "").upper()
            if algo != "EAGLE3":
                notes.append(f"the server runs --speculative-algorithm {algo or '(none)'}: only EAGLE3 uses an EAGLE-3 "
                             "draft's own lm_head and d2t (any other algorithm gives the draft the target's lm_head), "
                             "so drafts that differ only in their token map measure the same here")
            settings = compare_settings([(names[0], a), (names[1], draft_b)], include_baseline=include_baseline)
            for setting in settings:
                setting_launch(inventory.launch, setting)
            prompt_set = _prompt_set(inventory, prompts, num_prompts)
        except BaseException:
            restore_box(box, server_start_timeout=server_start_timeout)  # removes the journalled copy too
            box.close()
            raise
        run = cls(box, inventory, journal, settings=settings, prompts=prompt_set, max_new_tokens=max_new_tokens,
                  warmup=warmup, server_start_timeout=server_start_timeout, report_dir=report_dir, progress=progress,
                  request_timeout=request_timeout, force_launch=force_launch)
        run.cleanup_dirs, run.notes = cleanup, notes
        run.rank_by = "accept_length"  # the drafts' quality decides; tokens/s shown beside, ties broken by it
        return run

    def run(self) -> SweepResult:
        """Launch and measure every setting in turn (a progress bar over the settings: ``progress``
        True for a terminal or notebook widget, ``"text"`` for one stdout line when done, False for none), then
        compute the speedups; returns the (not yet restored) result."""
        from tqdm.auto import tqdm  # a terminal, or a widget in JupyterLab

        # papermill runbooks ("text"): no bar (its \r redraws land in the notebook's stderr and read as an
        # error block in the report), one stdout line when done, as measure_generate does
        started = time.monotonic()
        bar = tqdm(self.settings, desc="sweep", unit="setting", disable=self.progress in (False, "text"),
                   mininterval=1.0)
        for setting in bar:
            bar.set_postfix_str(setting.label)
            self.rows.append(self._run_one(setting))
        bar.close()
        if self.progress == "text":
            print(f"sweep: {len(self.rows)} setting(s) in {time.monotonic() - started:.1f} s", flush=True)
        base = next((r for r in self.rows if r.baseline and r.ok and r.tokens_per_s), None)
        for r in self.rows:
            if r.ok and r.tokens_per_s and base is not None:
                r.speedup = r.tokens_per_s / base.tokens_per_s
        self.result = self._result()
        return self.result

    def _run_one(self, setting: SpecSetting) -> SweepRow:
        launch = setting_launch(self.inventory.launch, setting)
        row = SweepRow(setting.label, setting.baseline, setting.steps, setting.topk, setting.draft_tokens, ok=False,
                       launch_command=launch.to_display(), draft_path=setting.draft_path)
        try:
            handle = self._launch(launch, setting.label)
        except LaunchRefused as exc:
            # never launched: the server found on the port (or the previous setting's) is untouched
            row.refused = [f.to_dict() for f in exc.findings]
            row.error = (str(exc) if isinstance(exc, GpusHeld) else  # the GPUs' holders, not the doctor's
                         "launch refused: the doctor's findings say the server would not start — "
                         + "; ".join(f"{f.rule}: {f.message}" for f in exc.findings))
            return row
        except (RemoteError, DiagnosisError) as exc:
            row.log_tail = list(getattr(exc, "log_tail", None) or [])
            if self.current is not None:
                row.log_tail = row.log_tail or self.box.tail(self.current.log_path, 20)
                self._stop_current()
            last = next((ln.strip() for ln in reversed(row.log_tail) if ln.strip()), None)
            row.error = f"the server did not start ({type(exc).__name__})" + (f": {last}" if last else
                                                                               f": {str(exc).splitlines()[0]}")
            return row
        row.healthy_after_s = self.launches[-1]["healthy_after_s"]
        try:
            key = launch.get("--api-key")
            m = measure_generate(self.inventory.base_url, self.prompts, max_new_tokens=self.max_new_tokens,
                                 warmup=self.warmup, fetch_server_info=False, progress=self.progress,
                                 timeout=self.request_timeout, api_key=key if isinstance(key, str) else None)
        except AcceptanceError as exc:
            row.error = f"measurement failed: {exc}"
            row.log_tail = self.box.tail(handle.log_path, 20)
            return row
        finally:
            self._stop_current()
        correct = [r.spec_num_correct_drafts for r in m.records if r.spec_num_correct_drafts is not None]
        row.ok = True
        row.accept_length, row.accept_rate = m.accept_length, m.accept_rate
        row.accepted_drafts_per_step = sum(correct) / m.verify_steps if m.verify_steps and correct else None
        if row.accepted_drafts_per_step is None and m.accept_length is not None and "vLLM" in (m.source or ""):
            row.accepted_drafts_per_step = m.accept_length - 1.0    # vLLM: accept length = 1 + accepted / drafts
        row.tau = 1 + row.accepted_drafts_per_step if row.accepted_drafts_per_step is not None else None
        row.tokens_per_s = m.tokens_per_s
        row.completion_tokens, row.verify_steps, row.requests = m.total_tokens, m.verify_steps, len(m.records)
        row.histogram = list(m.histogram) if m.histogram else None
        row.per_position = per_position(m.histogram) if m.histogram else None
        if not setting.baseline and not m.speculative:
            row.error = m.note
        return row

    def _result(self) -> SweepResult:
        return SweepResult(self.rows, self.box.name, self.inventory.port, len(self.prompts), self.max_new_tokens,
                           self.warmup, self.inventory.launch.to_display(),
                           round(time.monotonic() - self.started_at, 2),
                           # the restore's actions name the original command line, key included
                           REDACTOR.obj(self.restore_report.to_dict()) if self.restore_report else None,
                           REDACTOR.obj(list(self.notes)), REDACTOR.obj(self.guard.summary()), self.rank_by)

    def finish(self, name: str = "measure_acceptance") -> SweepResult:
        """Put the box back as found, then write ``report_dir/NAME.json`` and ``NAME.csv``."""
        if not self.finished:
            self.finished = True
            self.restore()
            self.result = self._result()
            self.result.write(self.report_dir, name)
        return self.result


def _prompt_set(inventory, prompts: str | None, num_prompts: int | None) -> list[dict]:
    """The prompts to send: ``prompts`` (a built-in set name, ``chat``/``code``/``math``/``default``,
    or a JSONL path: :func:`workbench.measure.prompts.load_prompts`), else ``default``, on the sandbox box
    its own code prompts; the first ``num_prompts``."""
    if prompts is None:
        prompts = str(sandbox_prompts_path()) if serves_sandbox_target(inventory) else "default"
    prompt_set = load_prompts(prompts)
    return prompt_set[:num_prompts] if num_prompts else prompt_set


def per_position(histogram: Sequence[int]) -> list[float]:
    """P(at least k drafts accepted in a verify step) for k = 1 … len(histogram) − 1, from SGLang's
    ``spec_correct_drafts_histogram`` (index k = verify steps that accepted exactly k drafts;
    SGLang 0.5.23 ``meta_info``, carried by ``srt/managers/io_struct.py`` BatchTokenIDOutput).
    Empty when the histogram counts no step."""
    total = sum(histogram)
    if not total:
        return []
    return [sum(histogram[k:]) / total for k in range(1, len(histogram))]


def rows_from(data: Iterable[dict]) -> list[SweepRow]:
    """Rows back from :meth:`SweepResult.to_dict` ``["rows"]`` (e.g. a saved JSON)."""
    fields = set(SweepRow.__dataclass_fields__)
    return [SweepRow(**{k: v for k, v in d.items() if k in fields}) for d in data]


def compare_settings(drafts: Sequence[tuple[str, str]], *, include_baseline: bool = False) -> list[SpecSetting]:
    """One setting per ``(name, draft directory on the box)``, every other flag as the launch command
    has it (so the drafts are compared on the same target, algorithm and steps); the baseline first
    when asked. Raises :class:`SweepError` for fewer than two drafts or duplicate names."""
    if len(drafts) < 2:
        raise SweepError("compare needs at least two drafts")
    names = [n for n, _ in drafts]
    if len(set(names)) != len(names):
        raise SweepError(f"draft names must differ, got {names}")
    out = [SpecSetting(baseline=True)] if include_baseline else []
    return out + [SpecSetting(draft_path=path, name=name) for name, path in drafts]


#: Run on the box by the engine's interpreter: argv = source dir, destination dir, seed. Copies the
#: draft checkpoint, rewriting the shard that holds ``d2t`` with the same draft->target ids in a
#: shuffled order (valid ids, wrong mapping); other files are copied, other shards symlinked.
BREAK_TOKEN_MAP_SCRIPT = r"""
import json, os, shutil, sys
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
src, dst, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst, exist_ok=True)
changed = []
for name in sorted(os.listdir(src)):
    path = os.path.join(src, name)
    if not os.path.isfile(path):
        continue
    if not name.endswith(".safetensors"):
        shutil.copy2(path, os.path.join(dst, name))
        continue
    with safe_open(path, framework="pt") as f:
        has_d2t, meta = "d2t" in f.keys(), f.metadata()
    if not has_d2t:
        os.symlink(os.path.abspath(path), os.path.join(dst, name))
        continue
    tensors = load_file(path)
    d2t = tensors["d2t"]
    n = d2t.shape[0]
    ar = torch.arange(n, dtype=d2t.dtype)
    hot = d2t + ar
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    tensors["d2t"] = (hot[perm] - ar).to(d2t.dtype)
    save_file(tensors, os.path.join(dst, name), metadata=meta)
    changed.append({"file": name, "draft_vocab": n, "moved": int((perm != torch.arange(n)).sum())})
print(json.dumps({"changed": changed}))
"""


def break_token_map(box, draft_dir: str, dest_dir: str, *, python: str, seed: int = 0, timeout: float = 600) -> dict:
    """Write to ``dest_dir`` on the box a copy of the EAGLE-3 draft ``draft_dir`` whose ``d2t``
    maps draft ids to the right set of target ids in the wrong order (a token map from another
    run): every id valid, so nothing fails at load, and the draft's proposals turn into other
    tokens. SGLang reads ``d2t`` as offsets: target id = draft id + d2t[draft id]
    (0.5.23 ``srt/models/llama_eagle3.py`` ``load_weights``). ``python``: an interpreter on the box
    with torch and safetensors (the engine's). Returns ``{"changed": [{"file", "draft_vocab",
    "moved"}]}``. Raises :class:`SweepError` when the draft has no ``d2t`` or the script fails."""
    import json as _json

    res = box.run([python, "-B", "-c", BREAK_TOKEN_MAP_SCRIPT, draft_dir, dest_dir, str(seed)], timeout=timeout, check=False)
    if res.exit_code != 0:
        last = next((ln for ln in reversed(res.stderr.strip().splitlines()) if ln.strip()), "no error output")
        raise SweepError(f"could not copy {draft_dir} with a broken token map: {last.strip()}")
    out = _json.loads(res.stdout.strip().splitlines()[-1])
    if not out["changed"]:
        raise SweepError(f"{draft_dir} has no d2t tensor: no token map to break")
    return out
