"""The launch guard: a launch the doctor knows will fail to start is never made.

Before a :class:`workbench.session.BoxSession` launches a server (the diagnosis's as-found,
probe, fix, candidate and ladder launches; every setting of a sweep), :class:`LaunchGuard` runs
the doctor (:func:`workbench.doctor.run_doctor`) on the exact command about to be launched, with
the session's working directory and the engine the inventory located, once per distinct command
(its environment prefix, program and arguments) and draft path. The error findings whose fault
stops the engine while it starts up (``Finding.prevents_start``, set by the rules from the
mechanism: argparse exits, a config or checkpoint that cannot be read, the weight loader's shape
assert, a capture rule that raises; see the start-up column of ``docs/rules.md``) refuse the
launch with :class:`workbench.errors.LaunchRefused`, before anything on the box is changed. A
finding that only lowers acceptance (the wrong ``--speculative-algorithm``) never refuses: the
diagnosis needs that launch to measure the symptom.

Two ways past it, both recorded (:attr:`LaunchGuard.checks`): ``force_launch`` (the runbooks'
parameter, for people who know better: the launch is made and the record names the findings it
overrode), and a command the box's original server is running with (it demonstrably starts: the
findings are recorded as contradicted and the launch goes ahead).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from remote.errors import RemoteError
from workbench.engine.launch import LaunchCommand
from workbench.errors import DoctorError, LaunchRefused
from workbench.rules.finding import Finding

__all__ = ["LaunchGuard", "GuardCheck", "refusing_findings", "LaunchRefused"]


def refusing_findings(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that refuse a launch: errors marked ``prevents_start`` (in their order).
    Warnings and information never refuse, nor does an error whose fault lets the server start."""
    return [f for f in findings if f.severity == "error" and f.prevents_start]


@dataclass
class GuardCheck:
    """One guard decision. ``label``: the step that wanted the launch; ``launch_command``: the
    command (text, as given, secrets redacted: :meth:`LaunchCommand.to_display`); ``decision``: ``allowed`` (no finding stops start-up), ``refused``,
    ``overridden`` (``force_launch``: launched anyway), ``contradicted`` (the original server runs
    this very command: launched), ``unchecked`` (the doctor could not run: ``error`` says why;
    launched, as before the guard existed); ``findings``: the refusing findings (dicts);
    ``cached``: the doctor's report was reused for this command."""

    label: str
    launch_command: str
    decision: str
    findings: list[dict] = field(default_factory=list)
    cached: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "launch_command": self.launch_command, "decision": self.decision,
                "findings": list(self.findings), "cached": self.cached, "error": self.error}


class LaunchGuard:
    """The doctor on each command before it is launched, cached per command and draft path.

    ``box``: the :class:`remote.Box`; ``engine_root``/``engine_version``: the engine the inventory
    located (``None``: the doctor locates it); ``cwd``: the directory the server starts in (what
    relative model paths are read against); ``force``: launch even when findings say it will not
    start (recorded as ``overridden``); ``running_argv``: the program and arguments of the server
    found running on the box (``None`` when none was), a command that demonstrably starts;
    ``timeout``: seconds for every box call the doctor makes. :attr:`checks` holds every
    decision, in order."""

    def __init__(self, box: Any, *, engine_root: str | None, engine_version: str | None, cwd: str | None,
                 force: bool = False, running_argv: Sequence[str] | None = None, timeout: float = 30.0):
        self.box = box
        self.engine_root = engine_root
        self.engine_version = engine_version
        self.cwd = cwd
        self.force = force
        self.running_argv = list(running_argv) if running_argv else None
        self.timeout = timeout
        self.checks: list[GuardCheck] = []
        self._reports: dict[tuple, Any] = {}

    @staticmethod
    def key(launch: LaunchCommand) -> tuple:
        """The cache key: the environment prefix, the program and arguments, and the draft path."""
        try:  # SGLang's --speculative-draft-model-path, vLLM's --speculative-config "model"
            draft = launch.draft_model
        except ValueError:  # vLLM's config unreadable (SpeculativeConfigError): the argv keys it
            draft = None
        return tuple(launch.env), tuple(launch.exec_argv), draft if isinstance(draft, str) else None

    def report(self, launch: LaunchCommand) -> tuple[Any, bool]:
        """``(DoctorReport, cached)`` for ``launch``: the doctor run once per :meth:`key`. Raises
        ``remote.errors.RemoteError`` (the box failed) and :class:`DoctorError`."""
        from workbench.doctor import run_doctor  # the doctor imports the rules; the session stays light

        k = self.key(launch)
        if k in self._reports:
            return self._reports[k], True
        rep = run_doctor(self.box, launch, timeout=self.timeout, engine_root=self.engine_root,
                         engine_version=self.engine_version, cwd=self.cwd)
        self._reports[k] = rep
        return rep, False

    def check(self, launch: LaunchCommand, label: str) -> GuardCheck:
        """Decide ``launch`` (for step ``label``) and record it. Returns the :class:`GuardCheck`
        when the launch may go ahead; raises :class:`LaunchRefused` (carrying the findings) when
        it is refused. A doctor that cannot run (a box error) does not refuse: ``unchecked``."""
        text = launch.to_display()  # secrets (API keys in flags or the environment prefix) redacted
        try:
            rep, cached = self.report(launch)
        except (RemoteError, DoctorError) as exc:
            c = GuardCheck(label, text, "unchecked", error=f"{type(exc).__name__}: {exc}")
            self.checks.append(c)
            return c
        blocking = refusing_findings(rep.findings)
        found = [f.to_dict() for f in blocking]
        if not blocking:
            c = GuardCheck(label, text, "allowed", cached=cached)
        elif self.running_argv is not None and list(launch.exec_argv) == self.running_argv:
            c = GuardCheck(label, text, "contradicted", found, cached)
        elif self.force:
            c = GuardCheck(label, text, "overridden", found, cached)
        else:
            self.checks.append(GuardCheck(label, text, "refused", found, cached))
            raise LaunchRefused(text, label, blocking)
        self.checks.append(c)
        return c

    def summary(self) -> dict[str, Any]:
        """For the verdict / sweep result: ``force_launch``, every check, and the counts of
        ``refused`` and ``overridden`` launches."""
        return {"force_launch": self.force, "checks": [c.to_dict() for c in self.checks],
                "refused": sum(c.decision == "refused" for c in self.checks),
                "overridden": sum(c.decision == "overridden" for c in self.checks)}
