"""The preflight doctor: every static rule of the catalogue (``docs/rules.md``) on one launch
command, reading only the box's files.

- :mod:`.run` — :func:`run_doctor` (gathers the facts through the box, runs the rules),
  :func:`preflight` (the runbook's one call), :func:`running_launch`;
- :mod:`.report` — :class:`DoctorReport` (findings, inputs read, the corrected launch command).

Layering: imports :mod:`workbench.rules`, :mod:`workbench.engine`, :mod:`workbench.checkpoint`,
:mod:`workbench.sandbox_box`, :mod:`remote` and :mod:`workbench.errors`.
"""

from workbench.doctor.report import DoctorReport
from workbench.doctor.run import RULE_IDS, preflight, run_doctor, running_launch
from workbench.errors import DoctorError

__all__ = ["DoctorError", "DoctorReport", "run_doctor", "preflight", "running_launch", "RULE_IDS"]
