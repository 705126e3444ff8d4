"""``workbench logs``: what an SGLang or vLLM server log says about acceptance, on any box.

    workbench logs FILE [--host SPEC] [--json] [--last N] [--follow SECONDS]
                        [--decode-log-interval N] [--buckets N] [--timeout S]

Reads the scheduler's ``Decode batch`` / ``Prefill batch`` lines (SGLang 0.4.0 - 0.5.23, see
:mod:`workbench.logs`) and prints: accept length and accept rate over time (min, median, max,
last, and a timeline), generation throughput, running requests, the time span, how many decode and
prefill lines there are, whether any line carries speculative fields at all, and the runtime
rule ``acceptance-collapsed`` (``docs/rules.md``), evaluated on the log.

``FILE`` is a path on the box (``--host``: ``local``, an ``~/.ssh/config`` alias,
``user@host[:port]``; over SSH the file is read through the box's SFTP by byte ranges). Without
``--last`` the whole file is read in 8 MiB ranges; ``--last N`` reads only the last N lines,
backwards from the end (a multi-GB log costs the blocks holding them). ``--follow SECONDS`` then
keeps reading what the server writes for that long (truncation and rotation handled; without
``--last`` it starts at the current end, so the summary covers only the new lines), printing each
new decode line; Ctrl-C ends it early. ``--decode-log-interval``: the server's value (default 40,
SGLang's default) for the rule's verify-step count. ``--timeout S``: seconds for each box call
(default 30).

A vLLM log (vLLM's logger prefix, ``SpecDecoding metrics`` lines: :mod:`workbench.logs.vllm_log`,
every wording from the V0 engine to 0.32) is summarised from its metrics lines: drafts, draft
tokens, accepted tokens, accept length (1 + accepted / drafts, bonus included), accept rate and
per-position acceptance, the printed mean lengths, and the same rule over the drafts.

A server that died (either engine) is named from its log's last 2 MiB (:mod:`workbench.logs.deaths`):
the engine's own final exception line, the start-up step it died in, the rank that logged it and
the known death it is with the rules that model it (``died`` in the JSON, a ``DIED`` line).

Exit codes: 0 the log was read and acceptance did not collapse, 1 ``acceptance-collapsed``
fired, 2 the log could not be read (no such file, a directory, not an SGLang log, an unreachable
box), with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Optional, Sequence

from workbench.cli.argtypes import positive_int, positive_seconds
from workbench.rules.acceptance_level import classify_acceptance
from workbench.cli.common import (
    CliError, ExitCode, add_box_options, add_json_option, open_box, run_command, set_command,
)

__all__ = ["add_parser", "main", "render_text"]


def add_parser(sub: Any) -> None:
    """Register ``workbench logs`` on the CLI's subparsers (``argparse`` ``add_subparsers()``)."""
    p = sub.add_parser("logs", help="accept length, accept rate and throughput from an SGLang or vLLM server log",
                       description=__doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n", 2)[2],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE", help="the server's log file on the box")
    add_box_options(p, timeout=30.0)
    add_json_option(p, "the summary")
    p.add_argument("--last", type=positive_int, metavar="N", help="only the last N lines (read backwards)")
    p.add_argument("--follow", type=positive_seconds, metavar="SECONDS",
                   help="then keep reading new lines for this many seconds")
    p.add_argument("--decode-log-interval", type=positive_int, default=40, metavar="N",
                   help="the server's --decode-log-interval (default 40, SGLang's default)")
    p.add_argument("--buckets", type=positive_int, default=12, metavar="N", help="timeline slices (default 12)")
    p.add_argument("--poll", type=positive_seconds, default=0.5, help=argparse.SUPPRESS)
    set_command(p, _run)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``workbench logs`` on its own (``python -m workbench.cli.logs FILE ...``, the same as
    ``workbench logs FILE ...``): the exit code. A usage error exits through argparse
    (``SystemExit(2)``)."""
    parser = argparse.ArgumentParser(prog="workbench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run_command(parser.parse_args(["logs", *(sys.argv[1:] if argv is None else argv)]))


def _run(args: argparse.Namespace) -> ExitCode:
    """``workbench logs``: see the module docstring. Raises :class:`CliError` (a log that cannot be
    read) and what connecting raises."""
    from remote.errors import RemoteError, RemoteFileNotFound, RemoteIsADirectory
    from workbench.logs import LogFollower, LogScanner, parse_log_line, read_box, tail_bytes
    from workbench.logs.deaths import read_death_from_box
    from workbench.logs.vllm_log import VllmLogReader

    box = open_box(args)
    path = args.file
    where = path if box.name == "local" else f"{path} on {box.name}"
    try:
        try:
            st = box.stat(path, timeout=args.timeout)
        except RemoteFileNotFound:
            raise CliError(f"no such file: {where}") from None
        if st.is_dir:
            raise CliError(f"{where} is a directory, not a log file")
        if not st.is_file:
            raise CliError(f"{where} is not a regular file")
        scanner = LogScanner()
        follower = None
        vllm = None
        if args.last:
            data, end = tail_bytes(box, path, args.last, timeout=args.timeout, end=st.size)
            vllm = VllmLogReader(offset=end - len(data))
            both = _Both(scanner, vllm)
            both.feed(data)
            source = f"last {args.last} lines of {where}"
        elif args.follow:
            end = st.size
            source = f"{where}, from byte {end}"
        else:
            vllm = VllmLogReader()
            both = _Both(scanner, vllm)
            end = read_box(box, path, both, timeout=args.timeout, end=st.size)
            source = where
        if args.follow:
            held = scanner.held_length                     # the follower reads it whole (capped)
            scanner.drop_held()
            if vllm is not None:
                vllm.finish()                              # (a partial last line is read again by the follower)
                vllm.records = [r for r in vllm.records if (r.offset or 0) < end - held]
            else:
                vllm = VllmLogReader(offset=end - held)
            vllm.offset, vllm.bytes, vllm._held = end - held, 0, b""
            both = _Both(scanner, vllm)
            follower = LogFollower(box, path, offset=end - held, timeout=args.timeout)
            started = time.monotonic()
            _follow(follower, both, args, parse_log_line)
            source += f", followed {time.monotonic() - started:.0f} s of {args.follow:g} s"
        else:
            scanner.finish()
        vllm.finish()
        summary = scanner.summary(source=source, buckets=args.buckets, decode_log_interval=args.decode_log_interval,
                                  events=follower.events if follower else ())
        vsum = vllm.summary(source=source)
        ceiling = _log_ceiling(box, path, timeout=args.timeout)
        death = read_death_from_box(box, path, timeout=args.timeout, size=st.size)
    except RemoteIsADirectory as exc:
        raise CliError(f"{where} is a directory, not a log file") from exc
    except RemoteFileNotFound as exc:
        raise CliError(f"{where} disappeared while it was read") from exc
    except (RemoteError, OSError, ValueError) as exc:
        raise CliError(f"cannot read {where}: {exc}") from exc
    finally:
        box.close()
    if vsum.looks_like_log and not (summary.decode_lines or summary.prefill_lines):
        return _vllm_result(vsum, args, path, ceiling, death)
    if not summary.looks_like_log:
        if not summary.bytes:
            if not args.follow:
                raise CliError(f"{where} is empty: no log line yet")
        else:
            raise CliError(f"{where} is not an SGLang server log, nor a vLLM one: none of its {summary.lines} lines opens "
                           "with SGLang's [YYYY-mm-dd HH:MM:SS] prefix or is a Decode/Prefill batch line, nor carries "
                           "vLLM's logger prefix ((PROCESS pid=N) LEVEL MM-DD HH:MM:SS [file.py:N]) or a "
                           "'SpecDecoding metrics' line")
    out = summary.to_dict()
    if summary.accept_rate is not None:
        from workbench.logs.formats import accept_rate_meanings

        out["accept_rate_meaning"] = "as printed by the server; by release: " + accept_rate_meanings()
    level = classify_acceptance(summary.acceptance.accept_length if summary.speculative else None, ceiling=ceiling)
    out["acceptance_level"] = level.to_dict()
    out["host"] = args.host
    out["path"] = path
    out["died"] = death.to_dict() if death is not None else None
    print(json.dumps(out, indent=2) if args.json else render_text(summary, level) + death_text(death))
    return ExitCode.FAILURE if summary.collapsed else ExitCode.OK


#: How much of a log's head :func:`_log_ceiling` reads for the server's start-up lines (bytes).
LOG_HEAD_BYTES = 256 * 1024


def _log_ceiling(box: Any, path: str, *, timeout: float) -> float | None:
    """The verify ceiling the log's own start-up lines state
    (:func:`workbench.rules.acceptance_level.ceiling_from_log`; its first :data:`LOG_HEAD_BYTES`)."""
    from workbench.rules.acceptance_level import ceiling_from_log

    head = box.read_bytes(path, 0, LOG_HEAD_BYTES, timeout=timeout)
    return ceiling_from_log(head.decode("utf-8", "replace").splitlines())


def death_text(death: Any) -> str:
    """The ``DIED`` line(s) of the text report ("" without a death): the step, the rank, the
    engine's own line, where, and the known death with its rules."""
    if death is None:
        return ""
    out = [f"\nDIED          in {death.step}" + (f" ({death.rank})" if death.rank else "") + f": {death.exception}"]
    if death.where:
        out.append(f"  raised at   {death.where}")
    if death.signature is not None:
        out.append(f"  known death {death.signature.id}: {death.signature.fault}; rules: "
                   f"{', '.join(death.signature.rules) or 'none models it'} (run workbench doctor on the launch "
                   "command to see which one fires)")
    else:
        out.append("  no known death has that text")
    return "\n".join(out)


class _Both:
    """Feeds the same bytes to the SGLang scanner and the vLLM reader (one read of the file)."""

    def __init__(self, scanner: Any, vllm: Any) -> None:
        self.scanner, self.vllm = scanner, vllm

    def feed(self, data: bytes) -> None:
        self.scanner.feed(data)
        self.vllm.feed(data)


def _vllm_result(vsum: Any, args: argparse.Namespace, path: str, ceiling: float | None = None,
                 death: Any = None) -> ExitCode:
    """Print what a vLLM log says (:func:`render_vllm_text` or JSON), its accept length judged
    against the ceiling its start-up lines state (:func:`classify_acceptance`), the death it shows
    (:func:`death_text`), and apply the
    ``acceptance-collapsed`` rule to its accept length over its drafts (verify steps)."""
    from workbench.rules.runtime import acceptance_collapsed

    findings = []
    if vsum.accept_length is not None and vsum.drafts:
        findings = acceptance_collapsed({"accept_length": vsum.accept_length, "verify_steps": vsum.drafts},
                                        source=f"{vsum.source}: 1 + accepted / drafts over "
                                               f"{len(vsum.spec_lines)} 'SpecDecoding metrics' lines")
    out = vsum.to_dict()
    out["findings"] = [f.to_dict() if hasattr(f, "to_dict") else f for f in findings]
    out["collapsed"] = bool(findings)
    level = classify_acceptance(vsum.accept_length, ceiling=ceiling)
    out["acceptance_level"] = level.to_dict()
    out["host"] = args.host
    out["path"] = path
    out["died"] = death.to_dict() if death is not None else None
    print(json.dumps(out, indent=2, default=str) if args.json else render_vllm_text(vsum, findings, level) + death_text(death))
    return ExitCode.FAILURE if findings or vsum.failed else ExitCode.OK


def render_vllm_text(s: Any, findings: Sequence[Any] = (), level: Any = None) -> str:
    """The plain-text report of a :class:`workbench.logs.vllm_log.VllmLogSummary` (what ``workbench
    logs`` prints for a vLLM log without ``--json``); ``level``: its accept length judged
    (:class:`workbench.rules.acceptance_level.AcceptanceLevel`; default: without a ceiling)."""
    lines = [f"{s.source}: {s.lines:,} lines ({s.vllm_lines:,} with vLLM's logger prefix)"]
    words = ", ".join(f"{k} {v}" for k, v in s.wordings.items())
    lines.append("engine        vLLM" + (f"; metrics-line wordings: {words}" if words else ""))
    if s.first:
        lines.append(f"time span     {s.first} -> {s.last} (vLLM's timestamps have no year)")
    errors = [e for e in getattr(s, "errors", []) if not e.after_stop]
    stopped = [e for e in getattr(s, "errors", []) if e.after_stop]
    if errors:
        lines.append(f"FAILED        {'the engine died' if s.engine_died else 'the server hit a fatal error'}: "
                     f"{len(errors)} distinct error line(s), {s.tracebacks} traceback(s); the first (root cause "
                     f"first in the log): {errors[0]}")
        for e in errors[1:]:
            lines.append(f"error         {e}")
    if stopped:
        lines.append(f"stopped       {len(stopped)} error line(s) after a stop signal (an ordinary shutdown), "
                     f"e.g. {stopped[0]}")
    n = len(s.spec_lines)
    lines.append(f"speculative   {'yes' if n else ('unknown' if errors else 'no')}: {n} 'SpecDecoding metrics' line(s)"
                 + (" (V0 'Speculative metrics', cumulative counts)" if s.cumulative else ""))
    if s.drafts is not None:
        lines.append(f"drafts        {s.drafts:,} (verify steps with drafts, recovered per line), draft tokens "
                     f"{s.drafted:,}, accepted {s.accepted:,}" + (f", emitted {s.emitted:,}" if s.emitted is not None else ""))
    if s.accept_length is not None:
        lines.append(f"accept length {s.accept_length:.3f}  (tokens per verify step, bonus included: "
                     + ("emitted / drafts)" if s.cumulative else "1 + accepted / drafts; vLLM's mean acceptance length)"))
    if s.accept_rate is not None:
        lines.append(f"accept rate   {s.accept_rate:.3f}  (accepted / draft tokens: correct / proposed drafts)")
    if s.per_position:
        pos = ", ".join(f"k={k} {p:.3f} ({c})" for k, (p, c) in enumerate(zip(s.per_position, s.per_position_accepted), 1))
        lines.append(f"per position  P(accepted >= k): {pos}")
    if s.mean_acceptance_length:
        m = s.mean_acceptance_length
        lines.append(f"printed mean acceptance length per line: min {m['min']:.2f}, median {m['median']:.2f}, "
                     f"max {m['max']:.2f}, last {m['last']:.2f} ({m['count']} lines)")
    if s.generation_throughput:
        busy = [v for v in s.generation_throughput if v > 0]
        if busy:
            lines.append(f"gen tok/s     median {sorted(busy)[len(busy) // 2]:.1f} over {len(busy)} busy "
                         "'Avg generation throughput' lines")
    for p in s.problems:
        lines.append(f"problem: {p}")
    for note in s.notes:
        lines.append(f"note: {note}")
    for f in findings:
        lines.append(f"{f.rule} [{f.severity}] {f.message}")
    level = level if level is not None else classify_acceptance(s.accept_length)
    if s.accept_length is not None:
        lines.append(f"acceptance    {level.words}")
    if s.accept_length is not None and not findings and level.level == "ok":
        lines.append(f"acceptance-collapsed: not fired (accept length {s.accept_length:.3f} over {s.drafts} drafts)")
    return "\n".join(lines)


def _follow(follower: Any, scanner: Any, args: argparse.Namespace, parse_line: Any) -> None:
    """Poll ``follower`` every ``args.poll`` seconds for ``args.follow`` seconds, feeding
    ``scanner``; without ``--json`` print each new decode line as it arrives. Ctrl-C stops."""
    deadline = time.monotonic() + args.follow
    try:
        while True:
            data = follower.poll()
            if data:
                scanner.feed(data)
                if not args.json:
                    for line in data.split(b"\n"):
                        if b"Decode batch" in line:
                            rec = parse_line(line)
                            if rec is not None and rec.kind == "decode":
                                print(_progress(rec), flush=True)
                        elif b"SpecDecoding metrics:" in line or b"Speculative metrics:" in line:
                            print(_vllm_progress(line), flush=True)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(args.poll, left))
    except KeyboardInterrupt:
        print(f"{args.prog}: stopped following (Ctrl-C)", file=sys.stderr)


def _vllm_progress(line: bytes) -> str:
    """One followed vLLM metrics line, shortened: time, drafts, accepted / drafted, mean length."""
    from workbench.logs.vllm_log import parse_spec_decoding_line

    rec = parse_spec_decoding_line(line)
    d, _ = rec.drafts()
    parts = [rec.when or "-", f"drafts {d if d is not None else '?'}", f"accepted {rec.accepted}/{rec.drafted}"]
    if rec.mean_acceptance_length is not None:
        parts.append(f"mean acceptance length {rec.mean_acceptance_length:.2f}")
    if rec.per_position:
        parts.append("per position " + ", ".join(f"{p:.3f}" for p in rec.per_position))
    return "  ".join(parts + [f"({'; '.join(rec.problems)})"] if rec.problems else parts)


def _progress(rec: Any) -> str:
    ts = rec.timestamp.isoformat(sep=" ") if rec.timestamp else "-"
    parts = [ts, f"#running-req {_num(rec.running_req)}"]
    if rec.accept_len is not None:
        parts.append(f"accept len {rec.accept_len:.2f}")
    if rec.accept_rate is not None:
        parts.append(f"accept rate {rec.accept_rate:.2f}")
    if rec.gen_throughput is not None:
        parts.append(f"gen {rec.gen_throughput:.1f} tok/s")
    return "  ".join(parts)


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.2f}"
    return str(int(v))


def render_text(summary: Any, level: Any = None) -> str:
    """The plain-text report of a :class:`workbench.logs.LogSummary` (what ``workbench logs``
    prints without ``--json``); ``level``: its accept length judged
    (:class:`workbench.rules.acceptance_level.AcceptanceLevel`, the words every command prints;
    default: judged without a ceiling)."""
    s = summary
    lines = [f"{s.source}: {s.bytes:,} bytes, {s.lines:,} lines"]
    if s.first:
        lines.append(f"time span     {s.first} -> {s.last} ({s.span_s:,.1f} s)")
    ranks = ", ".join(f"{k} {v:,}" for k, v in s.ranks.items())
    lines.append(f"batch lines   {s.decode_lines:,} decode ({s.spec_lines:,} with accept len), "
                 f"{s.prefill_lines:,} prefill" + (f"; rank tags: {ranks}" if ranks else ""))
    lines.append(f"speculative   {'yes: decode lines carry accept len' if s.speculative else 'no: no decode line carries accept len'}")
    rows = [("accept len", s.accept_len, 2), ("accept rate", s.accept_rate, 2),
            ("gen tok/s", s.gen_throughput, 1), ("#running-req", s.running_req, 1),
            ("input tok/s", s.input_throughput, 1)]
    if any(st is not None for _, st, _ in rows):
        lines.append(f"{'':14}{'min':>10}{'median':>10}{'max':>10}{'last':>10}{'mean':>10}  lines")
        for name, st, d in rows:
            if st is None:
                continue
            vals = "".join(f"{v:>10.{d}f}" for v in (st.min, st.median, st.max, st.last, st.mean))
            lines.append(f"{name:<14}{vals}  {st.count:,}" + ("  (prefill lines)" if name == "input tok/s" else ""))
        if s.accept_rate is not None:
            from workbench.logs.formats import accept_rate_meanings

            lines.append("accept rate is as the server printed it; its meaning depends on the release: "
                         + accept_rate_meanings() + " (accept len is the same on every release: tokens per "
                         "verify step, bonus included)")
    if s.timeline:
        lines.append(f"timeline ({len(s.timeline)} slices)")
        lines.append(f"  {'start':<23} {'lines':>6} {'accept len med (min-max)':>25} {'rate':>6} {'gen tok/s':>10} {'#run':>6}")
        for row in s.timeline:
            al = "-" if row["accept_len_median"] is None else \
                f"{row['accept_len_median']:.2f} ({row['accept_len_min']:.2f}-{row['accept_len_max']:.2f})"
            rate = "-" if row["accept_rate_median"] is None else f"{row['accept_rate_median']:.2f}"
            gen = "-" if row["gen_throughput_median"] is None else f"{row['gen_throughput_median']:.1f}"
            run = "-" if row["running_req_median"] is None else f"{row['running_req_median']:g}"
            lines.append(f"  {str(row['start'] or '-'):<23} {row['decode_lines']:>6} {al:>25} {rate:>6} {gen:>10} {run:>6}")
    for ev in s.events:
        e = ev.to_dict() if hasattr(ev, "to_dict") else ev
        lines.append(f"follow: {e['kind']} at byte {e['offset']:,}" + (f", old end read from {e['rotated_to']}"
                                                                     if e.get("rotated_to") else "")
                     + (f"; not read: {e['lost']}" if e.get("lost") else ""))
    for note in s.notes:
        lines.append(f"note: {note}")
    for f in s.findings:
        lines.append(f"{f.rule} [{f.severity}] {f.message}")
    level = level if level is not None else classify_acceptance(
        s.acceptance.accept_length if s.speculative else None)
    if s.speculative and s.acceptance.accept_length is not None:
        lines.append(f"acceptance: {level.words}")
    if s.speculative and not s.collapsed and level.level in ("ok", "unknown"):
        # the collapse rule's own status only where the level says nothing worse (never "not fired"
        # beside a value the runbook calls low)
        steps = s.spec_lines * s.decode_log_interval
        why = (f"mean accept len {s.acceptance.accept_length:.3f} > 1.05" if s.acceptance.accept_length > 1.05 else
               f"only {steps} verify steps (>= {s.spec_lines} lines x --decode-log-interval {s.decode_log_interval}), "
               "fewer than 20")
        lines.append(f"acceptance-collapsed: not fired ({why})")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
