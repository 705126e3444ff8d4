"""What every ``workbench`` subcommand shares: the exit codes, the one CLI error, the option
groups (the box: ``--host`` and ``--timeout``; ``--port``; ``--json``) and the one place where an
error ending a subcommand becomes its exit code and its line on stderr (:func:`run_command`).

A subcommand module (``workbench.cli.<name>``) has ``add_parser(sub)``, which registers its
parser(s) on the ``add_subparsers()`` of ``workbench`` and gives each runnable parser its
function with :func:`set_command`. The function returns an :class:`ExitCode` for what it found,
and raises for what stopped it: a :class:`CliError` (its code and one-line message), any
``workbench.errors.WorkbenchError`` (its ``exit_code``, 2 by default) or a
``remote.errors.RemoteError`` (2; a ``ProbeConflict`` 1). :func:`run_command` prints
``workbench <subcommand>: <message>`` on stderr and returns the code; an exception of any other
type is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import enum
import os
import sys
import time
from typing import Any, Callable, Optional

from workbench.cli.argtypes import positive_seconds, tcp_port
from workbench.errors import WorkbenchError
from workbench.redact import RedactingStream, register_flag_table


def _engine_flag_table() -> Any:
    """The shipped SGLang table, importing the engine layer (which registers the vLLM one too):
    what the redaction of printed text resolves option strings against (``--api-k`` is
    ``--api-key``). Registered as a factory: made only when a printed line holds a flag, so a
    command that prints none (``workbench report``) does not load the engine layer."""
    from workbench.engine.launch import DEFAULT_TABLE

    return DEFAULT_TABLE


register_flag_table(_engine_flag_table)

__all__ = [
    "ExitCode", "CliError", "BoxUnreachable", "connect_box", "unreachable_reason", "exit_code_for", "reworded", "run_command", "set_command", "add_box_options",
    "add_port_option", "add_json_option", "open_box", "one_line", "pending_notice", "HOST_HELP",
]


class ExitCode(enum.IntEnum):
    """The exit codes of every ``workbench`` subcommand."""

    #: the command ran and found nothing wrong
    OK = 0
    #: the command ran and found a failure: a doctor error finding, acceptance collapsed, a probe
    #: revert refused, a restore left something undone, a runbook cell failed
    FAILURE = 1
    #: the command could not run: bad arguments, an unreachable box, a missing file, ...
    CANNOT_RUN = 2
    #: interrupted (Ctrl-C, SIGTERM, SIGHUP)
    INTERRUPTED = 130


class CliError(WorkbenchError):
    """Ends a subcommand: ``workbench <subcommand>: <message>`` on stderr, exit ``code``.

    ``message`` is one line (the runbook's failing-cell report adds a second one naming where the
    executed notebook is); ``code`` an :class:`ExitCode` (default ``CANNOT_RUN``), kept as
    ``exit_code``. Raises ``ValueError`` for a code that is no :class:`ExitCode`.
    """

    def __init__(self, message: str, code: int = ExitCode.CANNOT_RUN):
        super().__init__(message)
        self.exit_code = ExitCode(code)


class BoxUnreachable(CliError):
    """The box could not be reached at all (:func:`connect_box`): the spec names no box (a mistyped
    alias, a bad port), the name does not resolve, the connection is refused or times out, the host
    key is not trusted, or no key is accepted. Nothing on the box was touched, so there is nothing
    to restore: one line, ``cannot reach box SPEC[ (user@host:port)]: WHY; nothing was changed``,
    exit ``CANNOT_RUN``. ``spec``: the box as given; ``cause``: the box layer's error (a
    ``remote.errors.BoxSpecError`` or ``SSHError``)."""

    def __init__(self, spec: str, cause: BaseException, *, tail: str = "nothing was changed"):
        self.spec = spec
        self.cause = cause
        super().__init__(f"cannot reach box {spec}{_destination(spec, cause)}: {unreachable_reason(cause)}; {tail}",
                         ExitCode.CANNOT_RUN)


def _destination(spec: str, exc: BaseException) -> str:
    where = getattr(exc, "where", None)
    return f" ({where})" if where and where != spec else ""


def unreachable_reason(exc: BaseException) -> str:
    """Why connecting failed, in one line, without the box's name that :class:`BoxUnreachable`
    already gives: an ``SSHConnectFailed``'s reason (``connection refused: nothing listens on
    127.0.0.1:1``, ``cannot resolve host name …``, ``timed out …``), else the error's message
    without its ``[box] user@host:port:`` prefix (an unknown host key, a refused key, a mistyped
    alias)."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason:
        return one_line(reason)
    text = str(getattr(exc, "message", None) or exc)
    where = getattr(exc, "where", None)
    if where and text.startswith(f"{where}: "):
        text = text[len(where) + 2:]
    return one_line(text)


def connect_box(spec: str, *, connect_timeout: Optional[float] = None, tail: str = "nothing was changed") -> Any:
    """``remote.connect(spec, connect_timeout=…)``, with every error of connecting itself (raised
    before anything on the box is read or changed: ``BoxSpecError`` — an unknown alias, a bad spec
    —, ``SSHConnectFailed`` — refused, unresolvable, timed out —, ``HostKeyError``,
    ``AuthenticationFailed``) raised as :class:`BoxUnreachable` (``tail``: what the line ends
    with)."""
    from remote import connect
    from remote.errors import RemoteError

    try:
        return connect(spec, connect_timeout=connect_timeout)
    except RemoteError as exc:
        raise BoxUnreachable(str(spec), exc, tail=tail) from exc


def exit_code_for(exc: BaseException) -> Optional[ExitCode]:
    """The exit code an error ends a subcommand with, or ``None`` when it is no error the
    workbench raises on purpose (a bug: it keeps its traceback).

    A :class:`~workbench.errors.WorkbenchError` (a :class:`CliError` too): its ``exit_code``. A
    ``remote.errors.ProbeConflict`` (a probed file edited by someone else, nothing changed):
    ``FAILURE``. Any other ``remote.errors.RemoteError`` (an unreachable box, a time-out, a file
    that is not there): ``CANNOT_RUN``.
    """
    if isinstance(exc, WorkbenchError):
        return ExitCode(exc.exit_code)
    from remote.errors import ProbeConflict, RemoteError  # here: `workbench report` never loads the box layer

    if isinstance(exc, ProbeConflict):
        return ExitCode.FAILURE
    if isinstance(exc, RemoteError):
        return ExitCode.CANNOT_RUN
    return None


def reworded(exc: BaseException, message: str) -> CliError:
    """A :class:`CliError` saying ``message`` instead of ``str(exc)``, with ``exc``'s exit code
    (:func:`exit_code_for`; ``CANNOT_RUN`` for an error of another kind), for a subcommand that
    words an error its own way: ``raise reworded(exc, f"{type(exc).__name__}: {exc}") from exc``."""
    return CliError(message, exit_code_for(exc) or ExitCode.CANNOT_RUN)


def one_line(text: Any) -> str:
    """``str(text)`` with every run of whitespace (newlines too) made one space."""
    return " ".join(str(text).split())


def set_command(parser: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int]) -> None:
    """Make ``parser`` runnable: :func:`run_command` calls ``func(args)`` and names the command
    ``parser.prog`` (``workbench probe add``) in front of its error messages."""
    parser.set_defaults(func=func, prog=parser.prog)


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed subcommand (``args.func(args)``, set by :func:`set_command`) and return
    its exit code (an :class:`ExitCode`).

    The one place where errors become exit codes: an error :func:`exit_code_for` knows is printed
    as ``<args.prog>: <message>`` on stderr and its code returned; anything else propagates. A
    stdout that is a closed pipe (``| head``) ends the command with ``FAILURE``, quietly; a
    ``KeyboardInterrupt`` (Ctrl-C) with ``INTERRUPTED`` (130) and ``<args.prog>: interrupted``.
    While the subcommand runs, ``sys.stdout`` and ``sys.stderr`` redact every line
    (:class:`workbench.redact.RedactingStream`).
    """
    # Secrets never leave the box: everything a subcommand prints goes through the redactor
    # (workbench.redact: secret flags and variables, URL credentials, token shapes, and the values
    # the subcommand learned from the box's launch commands and environments).
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(streams[0]), RedactingStream(streams[1])
    try:
        return _run_command(args)
    finally:
        for wrapped in (sys.stdout, sys.stderr):
            try:
                wrapped.flush()
            except (BrokenPipeError, ValueError):  # a closed pipe or stream: nothing more can be shown
                continue
        sys.stdout, sys.stderr = streams


def _run_command(args: argparse.Namespace) -> int:
    try:
        return ExitCode(args.func(args))
    except KeyboardInterrupt:  # Ctrl-C where the command did not catch it itself: no traceback
        print(f"{args.prog}: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # the output went to a pipe that closed (`| head`): what was done is done
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return ExitCode.FAILURE
    except Exception as exc:
        code = exit_code_for(exc)
        if code is None:
            raise
        print(f"{args.prog}: {exc}", file=sys.stderr)
        return code


# -- option groups -----------------------------------------------------------------------------

#: The help of ``--host``, the same on every subcommand.
HOST_HELP = "the box: local (this machine), an ~/.ssh/config alias or user@host[:port] (default: local)"


class _TimeoutAction(argparse.Action):
    """``--timeout S`` given on the command line: stored as ``timeout``, and as ``connect_timeout``
    too, so an explicit time-out also bounds connecting to the box (without it ``connect_timeout``
    stays ``None``: the ssh config's ``ConnectTimeout``, default 15 s)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.connect_timeout = values


def add_box_options(parser: argparse.ArgumentParser, *, timeout: float, timeout_help: str = "each call to the box",
                    host_default: Optional[str] = "local", host_help: str = HOST_HELP) -> None:
    """``--host SPEC`` and ``--timeout S`` on a subcommand that talks to a box.

    ``args.host``: the spec for ``remote.connect`` (``host_default`` when not given; the runbook
    passes ``None``: its ``-p host`` decides). ``args.timeout``: positive seconds for every box call
    (``timeout_help`` says which), ``timeout`` when not given. ``args.connect_timeout``: the same
    seconds when ``--timeout`` was given, else ``None`` (see :func:`open_box`).
    """
    parser.add_argument("--host", default=host_default, metavar="SPEC", help=host_help)
    parser.add_argument("--timeout", type=positive_seconds, default=timeout, action=_TimeoutAction, metavar="S",
                        help=f"seconds for {timeout_help} (default {timeout:g}); when given it also bounds "
                             "connecting to the box (else the ssh config's ConnectTimeout, default 15)")
    parser.set_defaults(connect_timeout=None)


def add_port_option(parser: argparse.ArgumentParser, help: str, *, default: Optional[int] = None) -> None:
    """``--port N``: a TCP port number 1..65535 (:func:`~workbench.cli.argtypes.tcp_port`; anything
    else is a usage error, exit 2); ``default`` when not given."""
    parser.add_argument("--port", type=tcp_port, default=default, metavar="N", help=help)


def add_json_option(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    """``--json``: print ``what`` as JSON instead of text (``args.json``, a bool)."""
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def open_box(args: argparse.Namespace, host: Optional[str] = None, *, notice: bool = True,
             unreachable: str = "nothing was changed") -> Any:
    """``remote.connect(host or args.host, connect_timeout=args.connect_timeout)``: the box of a
    subcommand with :func:`add_box_options`. A box that cannot be reached at all raises
    :class:`BoxUnreachable` (:func:`connect_box`; ``unreachable``: what its line ends with).

    ``notice``: say on stderr, in one line, when a run left the box changed
    (:func:`pending_notice`: one small read of the box's run lock and journal)."""
    spec = host if host is not None else args.host
    box = connect_box(spec, connect_timeout=args.connect_timeout, tail=unreachable)
    if notice:
        line = pending_notice(box, spec, timeout=min(float(getattr(args, "timeout", None) or 10.0), 10.0))
        if line:
            print(f"{args.prog}: {line}", file=sys.stderr)
    return box


def pending_notice(box: Any, spec: str, *, timeout: float = 10.0) -> Optional[str]:
    """One line when a diagnosis or sweep that is no longer alive left ``box`` changed (its
    journal pending), naming the run (id, when it started) and offering ``workbench restore
    --host SPEC``; else, when the run's watchdog restored the box on its own and its report was not
    shown yet, that (:func:`workbench.session.watchdog.report_notice`). ``None`` when nothing is pending, or when the run is still alive (it holds the
    run lock, or, without one, the journal's owner still runs here): it restores the box itself. A box whose
    state cannot be read gets a line saying so (never an exception: the command goes on)."""
    from remote.errors import RemoteError
    from workbench.errors import JournalError
    from workbench.session import runlock
    from workbench.session.journal import journal_owner_alive, pending_journal_from_text, pending_summary

    try:
        status = runlock.box_status(box, timeout=timeout)
    except (RemoteError, JournalError) as exc:
        return f"could not check the box for a run left pending: {one_line(exc)}"
    journal = pending_journal_from_text(status.journal_text)
    holder = status.holder
    if holder is not None and holder.alive:
        return None  # a run in progress: its journal is its own business (it restores the box itself)
    if journal is None:
        from workbench.session.watchdog import parse_report, report_notice

        report = parse_report(status.watchdog_report_text)
        if report is not None:  # the watchdog restored the box on its own: say so until it is shown
            return f"{report_notice(report)}; `workbench status --host {spec}` shows what it did"
        return None
    if holder is None and "unreadable" not in journal and journal_owner_alive(journal):
        return None  # a journal without a run lock (an older workbench's run) whose owner still runs here
    if "unreadable" in journal:
        return (f"the box's diagnosis journal is unreadable ({journal['unreadable']}); "
                f"see `workbench restore --host {spec}`")
    started = journal.get("started_at")
    when = (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started))
            if isinstance(started, (int, float)) else "at an unknown time")
    return (f"run {journal.get('run_id')} (started {when}) left the box changed ({pending_summary(journal)}); "
            f"undo it with `workbench restore --host {spec}`")
