"""The diagnosis: the ``diagnose_acceptance`` runbook as an orchestrator (:mod:`.run`,
:class:`DiagnosisRun`) over its steps, one module each (:mod:`.steps`: symptom → preflight →
hypotheses → probe → fixes → ladder → finish), the values they hand on (:mod:`.context`), the
hypothesis ledger (:mod:`.ledger`) and the verdict (:mod:`.verdict`, :mod:`.summary`). The
JupyterLab control panel over the same steps is :mod:`workbench.lab.panel` (it needs ipywidgets).

Layering: the top of the library — imports :mod:`workbench.session`, :mod:`workbench.measure`,
:mod:`workbench.doctor`, :mod:`workbench.rules`, :mod:`workbench.engine`, :mod:`workbench.logs`,
:mod:`workbench.report` and :mod:`remote`; only :mod:`workbench.cli` and the notebooks import it.
"""

from workbench.diagnosis.ledger import Evidence, Hypothesis, Ledger
from workbench.diagnosis.run import DiagnosisRun, Measurement, StepResult
from workbench.errors import DiagnosisError, LedgerError

__all__ = ["DiagnosisRun", "Measurement", "StepResult", "DiagnosisError", "Evidence", "Hypothesis", "Ledger",
           "LedgerError"]
