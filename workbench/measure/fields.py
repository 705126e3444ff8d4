"""Where each SGLang release puts its acceptance numbers, and under which names: ``/generate``
``meta_info`` keys, the ``/server_info`` endpoint and its ``avg_spec_accept_length``, and the
Prometheus metric names.

Read from the published wheels (``pip download --no-deps sglang==X``, unpacked, never installed).
``first`` / ``last`` are the earliest / latest release read that has the name (``last`` ``None``:
still there in 0.5.23); releases read: 0.4.6 - 0.4.10, 0.5.1 - 0.5.10, 0.5.12, 0.5.15, 0.5.18,
0.5.20, 0.5.23. ``tests/workbench/test_acceptance_releases.py`` checks every row against the wheels
of :data:`workbench.engine.releases.COVERED_RELEASES` (present exactly in the releases the row
claims), so the tables cannot silently rot.

``meta_info`` (``srt/managers/tokenizer_manager.py``; 0.4.6 - 0.5.3 in ``_handle_batch_output``,
from 0.5.4 in ``_calculate_spec_decoding_metrics``):

- 0.4.6 - 0.5.3: only ``spec_verify_ct``, on a finished request of a server started with
  ``--speculative-algorithm``: accept length (completion_tokens / spec_verify_ct) only.
- 0.5.4 - 0.5.6: ``spec_accept_rate`` = 0.0, ``spec_accept_length`` = 0 and ``spec_verify_ct`` are
  set first, for every finished request, and overwritten only when ``spec_verify_ct > 0``: a 0 is
  "not measured", never a value. 0.5.4 - 0.5.5: ``spec_accept_rate`` = correct drafts /
  (spec_verify_ct × ``speculative_num_steps``) (``total_draft_tokens = recv_obj.spec_verify_ct[i] *
  self.server_args.speculative_num_steps``; the req's ``spec_accepted_tokens`` counts correct drafts,
  ``speculative/eagle_info.py``: ``sum(1 for idx in accept_index_row if idx != -1) - 1``), no count.
- 0.5.6 - 0.5.10: ``spec_accept_token_num`` (correct drafts) and ``spec_draft_token_num``
  (spec_verify_ct × (D − 1)); ``spec_accept_rate`` = their ratio. 0.5.9 - 0.5.10 also
  ``spec_accept_histogram`` (index k: verify steps accepting exactly k drafts).
- 0.5.12 - 0.5.23: ``spec_num_correct_drafts``, ``spec_num_proposed_drafts``,
  ``spec_correct_drafts_histogram``; 0.5.12 - 0.5.20 also the old names as aliases
  (``spec_accepted_drafts``, ``spec_proposed_drafts``, ``spec_accept_histogram``: "FIXME:
  backward-compat aliases"), gone in 0.5.23.

``/server_info``: 0.4.6 - 0.5.5 serve only ``GET /get_server_info``; 0.5.6 adds ``/server_info``
(``srt/entrypoints/http_server.py``). ``avg_spec_accept_length`` (τ over the server's lifetime):
0.4.6 at the top level of the answer (``**internal_states``), from 0.4.7 in each
``internal_states[i]`` (one dict per DP rank).

Prometheus (``/metrics`` with ``--enable-metrics``): ``srt/metrics/collector.py`` up to 0.5.9,
``srt/observability/metrics_collector.py`` from 0.5.10. ``sglang:spec_verify_calls_total`` exists
only from 0.5.15 (before, the counters give no accept length); ``sglang:spec_accept_rate`` from
0.5.4, with the decode line's definition of that release (:mod:`workbench.logs.formats`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from workbench.logs.formats import release_key

__all__ = ["ReleaseName", "META_INFO_KEYS", "SERVER_INFO_NAMES", "METRIC_NAMES", "metrics_file", "names_in",
           "has_name"]


@dataclass(frozen=True)
class ReleaseName:
    """One name an SGLang release range uses.

    ``name``: the key / metric / route as the server writes it; ``means``: the workbench field
    it feeds (``verify_steps``, ``correct_drafts``, ``proposed_drafts``, ``histogram``,
    ``accept_length``, ``accept_rate``, ...); ``first`` / ``last``: earliest / latest release read
    with it (``last`` ``None``: still in 0.5.23); ``file``: where it is written (relative to the
    ``sglang`` package; for metrics see :func:`metrics_file`); ``source_text``: the text the file
    holds for it (what the release-checking test looks for); ``note``: caveats."""

    name: str
    means: str
    first: str
    last: Optional[str]
    file: str
    source_text: str
    note: str = ""

    def covers(self, version: str) -> bool:
        """Whether the release ``version`` lies in ``first`` … ``last``."""
        k = release_key(version)
        return release_key(self.first) <= k and (self.last is None or k <= release_key(self.last))


_TM = "srt/managers/tokenizer_manager.py"


def _meta(name: str, means: str, first: str, last: Optional[str], note: str = "") -> ReleaseName:
    return ReleaseName(name, means, first, last, _TM, f'meta_info["{name}"] =', note)


#: ``/generate`` ``meta_info`` keys, by the field they give (module docstring).
META_INFO_KEYS = (
    _meta("spec_verify_ct", "verify_steps", "0.4.6", None,
          "0.4.6 - 0.5.3: finished requests of speculative servers only; 0.5.4 - 0.5.6: also 0"),
    _meta("spec_accept_length", "accept_length", "0.5.4", None,
          "completion_tokens / spec_verify_ct; 0.5.4 - 0.5.6 write 0 when not measured"),
    _meta("spec_accept_rate", "accept_rate", "0.5.4", None,
          "0.5.4 - 0.5.5: correct / (verify × speculative_num_steps); from 0.5.6: correct / (verify × (D − 1)); "
          "0.5.4 - 0.5.6 write 0.0 when not measured"),
    _meta("spec_accept_token_num", "correct_drafts", "0.5.6", "0.5.10"),
    _meta("spec_draft_token_num", "proposed_drafts", "0.5.6", "0.5.10"),
    _meta("spec_accept_histogram", "histogram", "0.5.9", "0.5.20",
          "0.5.12 - 0.5.20: an alias of spec_correct_drafts_histogram"),
    _meta("spec_num_correct_drafts", "correct_drafts", "0.5.12", None),
    _meta("spec_num_proposed_drafts", "proposed_drafts", "0.5.12", None),
    _meta("spec_accepted_drafts", "correct_drafts", "0.5.12", "0.5.20", "alias of spec_num_correct_drafts"),
    _meta("spec_proposed_drafts", "proposed_drafts", "0.5.12", "0.5.20", "alias of spec_num_proposed_drafts"),
    _meta("spec_correct_drafts_histogram", "histogram", "0.5.12", None),
)

_HTTP = "srt/entrypoints/http_server.py"

#: ``/server_info`` routes and where ``avg_spec_accept_length`` lives (module docstring).
SERVER_INFO_NAMES = (
    ReleaseName("/get_server_info", "server_info_route", "0.4.6", None, _HTTP, '@app.get("/get_server_info")'),
    ReleaseName("/server_info", "server_info_route", "0.5.6", None, _HTTP, '@app.get("/server_info")'),
    ReleaseName("avg_spec_accept_length (top level)", "tau_lifetime", "0.4.6", "0.4.6", _HTTP,
                "**internal_states,", "the internal state merged into the answer"),
    ReleaseName("internal_states[i].avg_spec_accept_length", "tau_lifetime", "0.4.7", None, _HTTP,
                '"internal_states": internal_states,', "one dict per DP rank"),
)


def metrics_file(version: str) -> str:
    """The file (relative to the ``sglang`` package) that declares the Prometheus metrics in
    ``version``: ``srt/metrics/collector.py`` up to 0.5.9, ``srt/observability/metrics_collector.py``
    from 0.5.10."""
    return "srt/observability/metrics_collector.py" if release_key(version) >= (0, 5, 10) \
        else "srt/metrics/collector.py"


def _metric(name: str, means: str, first: str, note: str = "") -> ReleaseName:
    return ReleaseName(name, means, first, None, "(metrics_file)", f'name="{name}"', note)


#: Prometheus names the ``metrics`` source reads (module docstring).
METRIC_NAMES = (
    _metric("sglang:spec_accept_length", "tau_interval", "0.4.6", "gauge: τ of the last decode-log interval"),
    _metric("sglang:spec_accept_rate", "accept_rate_interval", "0.5.4",
            "gauge: the decode line's accept rate of that release (workbench.logs.formats)"),
    _metric("sglang:spec_verify_calls_total", "verify_steps", "0.5.15", "counter"),
    _metric("sglang:spec_num_steps", "num_steps", "0.5.15", "gauge"),
    _metric("sglang:spec_num_draft_tokens", "num_draft_tokens", "0.5.15", "gauge"),
    _metric("sglang:generation_tokens_total", "completion_tokens", "0.4.6", "counter"),
    _metric("sglang:prompt_tokens_total", "prompt_tokens", "0.4.6", "counter"),
    _metric("sglang:num_requests_total", "requests", "0.4.6", "counter"),
)


def names_in(table: tuple[ReleaseName, ...], version: str) -> list[ReleaseName]:
    """The rows of ``table`` that release ``version`` has."""
    return [r for r in table if r.covers(version)]


def has_name(table: tuple[ReleaseName, ...], name: str, version: Optional[str]) -> Optional[bool]:
    """Whether release ``version`` has ``name`` per ``table``; ``None`` when the version is unknown
    (``None`` or not a version text) or the table has no row for ``name``."""
    rows = [r for r in table if r.name == name]
    if not rows or not version:
        return None
    try:
        return any(r.covers(version) for r in rows)
    except ValueError:
        return None
