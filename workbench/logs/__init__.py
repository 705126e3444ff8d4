"""Server logs (SGLang; vLLM in :mod:`.vllm_log`): parse the scheduler's ``Decode batch`` / ``Prefill batch`` lines of every
release from 0.4.0 to 0.5.23, summarize a log of any size fast, tail it, follow it.

Formats (read from the published ``sglang`` wheels; file and function named; samples of each in
``tests/fixtures/logs/`` with their exact source):

====================  =========================================================================
release               what changes in the line (``srt/managers/...``)
====================  =========================================================================
0.4.0 - 0.4.3         ``scheduler.py`` ``log_prefill_stats`` / ``log_decode_stats``.
                      Prefix ``[%Y-%m-%d %H:%M:%S TP{n}]`` (TP always, ``DP{n} TP{n}`` with DP
                      attention; ``srt/utils.py`` ``configure_logger``).
                      ``Prefill batch. #new-seq: N, #new-token: N, #cached-token: N, cache hit
                      rate: P%, token usage: F, #running-req: N, #queue-req: N``;
                      ``Decode batch. #running-req: N, #token: N, token usage: F, [accept len: F, ]
                      gen throughput (token/s): F, #queue-req: N`` (``accept len`` from 0.4.3).
0.4.6                 no ``cache hit rate``; PD prefill ends ``#unbootstrapped-req: N, #queue-req:
                      N, #transferring-req: N `` (trailing space); PD decode ``pre-allocated
                      usage: F, `` before the throughput.
0.4.10                ``scheduler_metrics_mixin.py``. Tags ``DP TP EP PP``, ``TP`` only when
                      tp > 1. Hybrid SWA ``#full token``/``#swa token``; ``cuda graph: B, `` before
                      the throughput; PD ``#retracted-req``; lines end with ``", "``.
0.5.3                 ``cuda graph``/``cpu graph``; PD decode ``#prealloc-req``, ``#transfer-req``;
                      PD prefill ``#prealloc-req``, ``#inflight-req``; still ``batch.`` and ``", "``.
0.5.4                 ``Decode batch [N],`` (the iteration always; the wheel's
                      ``scheduler_metrics_mixin.py``) and ``accept rate``; a public 0.5.4 log
                      (sgl-project/sglang#11948) shows ``Decode batch.`` with ``accept rate``.
0.5.5 - 0.5.7         ``Decode batch,`` / ``Prefill batch,`` and the optional iteration
                      ``batch [N],`` (``SGLANG_LOG_FORWARD_ITERS``); ``accept rate``; hybrid GDN
                      ``mamba num``/``mamba usage``; 0.5.7: ``.mmm`` with ``SGLANG_LOG_MS``, tags
                      ``DP PP TP EP``.
0.5.10                ``observability/scheduler_metrics_mixin.py``. No trailing comma (the line ends
                      at ``#queue-req: N`` or an ``est. ...`` suffix); ``npu graph``; tags
                      ``DP PP ATTN_CP MOE_DP TP EP``; prefill always ends ``{graph}: B, input
                      throughput (token/s): F``.
0.5.17 - 0.5.23       ``scheduler_components/metrics_reporter.py`` ``report_decode_stats`` /
                      ``report_prefill_stats``. ``musa graph``; ``cap len``, ``block accept len``;
                      DSpark ``est uncap acc len: F [F, F]``; ``#pending-token``, ``#bootstrap-req``,
                      ``#optimistic-req``, ``#replay-token``; ``fwd occupancy: P%``; 0.5.23 PD
                      ``#host-receive-req``; HiSparse ``#gpu token``/``#cpu token``.
====================  =========================================================================

No release from 0.4.0 to 0.5.23 names the accept length anything but ``accept len`` (always τ:
accepted tokens, bonus included, per verify step), nor writes a ``largest-len`` field. The printed
``accept rate`` changed its definition (0.5.4 - 0.5.5 τ/(S+1), 0.5.6 - 0.5.10 τ/D, 0.5.12 on
correct/proposed drafts): :mod:`workbench.logs.formats` holds the formats per release and turns
any of them into correct/proposed (:func:`~workbench.logs.formats.engine_accept_rate`,
:func:`acceptance_from_log` with ``version=``); unknown ``key: value`` items are kept in :attr:`LogRecord.fields` whatever
their name. SGLang's own ``srt/debug_utils/log_parser.py`` does not match most of these lines.

Two parsers, the same answers:

- :func:`parse_log_line` (complete, one line at a time): a :class:`LogRecord` with every field.
- :class:`LogScanner` (fast): the numbers a summary needs (time, running requests, accept len and
  rate, gen and input throughput, rank tags) from whole buffers with numpy, over 100 MB/s on one
  core (``benchmarks/bench_logs.py``); a line it cannot vouch for (a container prefix before
  SGLang's, brackets in the body, a value that is not a plain number, a duplicated key, a bare line
  from a custom logging config) goes through :func:`parse_log_line`, so both give the same values
  (``tests/workbench/test_logs.py`` checks it line by line).

Box access: :func:`scan_box` (the whole file in blocks, never whole in memory), :func:`tail_box`
(the last N lines, read backwards: time independent of the file's size) and :class:`LogFollower`
(new complete lines of a growing file, across truncation and rotation). Bytes that are not UTF-8
never raise: numbers are read from the bytes, text is decoded with replacement characters.

Modules, in dependency order (each imports only modules above it; no cycle):

====================  =========================================================================
module                what it holds
====================  =========================================================================
:mod:`.formats`       the acceptance part of the decode line per release
                      (:data:`~.formats.DECODE_LINE_FORMATS`), the accept-rate conversions.
                      Standard library only.
:mod:`.lines`         the complete parser: SGLang's prefix / batch regexes, ``_number``,
                      :class:`LogRecord`, :func:`parse_log_line`, :class:`ParsedLog`,
                      :func:`parse_log`, :class:`LogAcceptance`, :func:`acceptance_from_log`,
                      :func:`epoch_seconds`, ``_iso``, :data:`DEFAULT_DECODE_LOG_INTERVAL`.
                      Standard library only.
:mod:`.bounded`       :data:`MAX_LINE` (64 KiB: the longest line any reader holds), the cut mark
                      (:func:`cut_length`), :func:`cap_lines`, :class:`LineCapper`, re-exported
                      from :mod:`remote.box` (``tail_lines``). numpy and ``remote.box`` only.
:mod:`.summary`       :class:`Stat`, :class:`LogSummary` (built from anything with a scanner's
                      ``arrays()`` and counts, :class:`~.summary.ScannedLog`), the timeline and
                      the fast median. Imports ``lines`` and
                      :mod:`workbench.rules.runtime` (the ``acceptance-collapsed`` rule).
:mod:`.scanner`       :class:`LogScanner`, the numpy scanner: key tables, ``_Block``, the SWAR
                      number readers, prefix / tag readers, templates. Imports ``lines`` and
                      ``summary``.
:mod:`.read`          whole inputs and box access: :func:`summarize_bytes`, :func:`scan_file`,
                      :func:`read_box`, :func:`scan_box`, :func:`tail_bytes`, :func:`tail_box`,
                      :func:`read_decode_records` (a measurement's decode lines, bounded),
                      ``_check_file``, ``BLOCK``, ``TAIL_BLOCK``. Imports ``scanner`` and
                      ``summary`` (and :mod:`remote.errors` lazily).
:mod:`.follow`        :class:`FollowEvent`, :class:`LogFollower`. Imports ``read``.
:mod:`.vllm_log`      vLLM logs: the ``SpecDecoding metrics`` / ``Speculative metrics`` line of
                      every wording (V1 0.32 back to 0.8, the V0 engine's cumulative one),
                      :class:`~.vllm_log.SpecDecodingLine`, :class:`~.vllm_log.VllmLogReader`,
                      :class:`~.vllm_log.VllmLogSummary` (drafts, accepted, accept length = 1 +
                      accepted / drafts, per-position acceptance over a window). Standard library only.
:mod:`.startup`       start-up progress of an SGLang or vLLM server (phase, shard count, phase
                      times, last line, ranks): :func:`~.startup.startup_progress`,
                      :class:`~.startup.StartupTracker` (fed as the log grows). Imports ``lines``.
====================  =========================================================================

Every name below stays importable as ``from workbench.logs import X`` (what
:mod:`workbench.diagnosis`, :mod:`workbench.cli.logs`, the tests and the benchmarks import,
the private readers the tests check included). Nothing in the package imports
:mod:`workbench.sandbox`.
"""

from workbench.errors import LogInputError
from workbench.logs.lines import (
    DEFAULT_DECODE_LOG_INTERVAL,
    LogAcceptance,
    LogRecord,
    ParsedLog,
    acceptance_from_log,
    epoch_seconds,
    parse_log,
    parse_log_line,
)
from workbench.logs.formats import DECODE_LINE_FORMATS, correct_draft_rate, decode_line_format, engine_accept_rate
from workbench.logs.bounded import MAX_LINE, LineCapper, cap_lines, cut_length
from workbench.logs.summary import LogSummary, Stat
from workbench.logs.scanner import LogScanner
from workbench.logs.read import (
    BLOCK,
    TAIL_BLOCK,
    read_box,
    read_decode_records,
    scan_box,
    scan_file,
    summarize_bytes,
    tail_box,
    tail_bytes,
)
from workbench.logs.follow import FollowEvent, LogFollower, ServerLogFollower, TailUpdate, read_when_settled
from workbench.logs.startup import PHASES as STARTUP_PHASES, StartupProgress, StartupTracker, startup_progress
from workbench.logs.vllm_log import (
    SpecDecodingLine,
    VllmLogReader,
    VllmLogSummary,
    parse_spec_decoding_line,
    summarize_spec_lines,
)

__all__ = [
    "LogRecord", "ParsedLog", "LogAcceptance", "parse_log_line", "parse_log", "acceptance_from_log",
    "LogScanner", "LogSummary", "Stat", "FollowEvent", "LogFollower", "ServerLogFollower", "TailUpdate", "LogInputError",
    "read_when_settled",
    "summarize_bytes", "scan_file", "scan_box", "read_box", "tail_bytes", "tail_box", "epoch_seconds",
    "DEFAULT_DECODE_LOG_INTERVAL", "BLOCK", "TAIL_BLOCK", "read_decode_records", "MAX_LINE", "LineCapper",
    "cap_lines", "cut_length", "DECODE_LINE_FORMATS", "decode_line_format", "correct_draft_rate",
    "engine_accept_rate", "SpecDecodingLine", "VllmLogReader", "VllmLogSummary", "parse_spec_decoding_line",
    "summarize_spec_lines", "STARTUP_PHASES", "StartupProgress", "StartupTracker", "startup_progress",
]
