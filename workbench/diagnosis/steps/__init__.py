"""The steps of a diagnosis, one module each, in the runbook's order: :mod:`.symptom`,
:mod:`.static` (preflight), :mod:`.hypotheses`, :mod:`.probe` (its readings: :mod:`.readings`),
:mod:`.fixes` (a relaunch with fixes: :mod:`.relaunch`; candidates: :mod:`.candidates`),
:mod:`.ladder`, :mod:`.finish`. Each takes a :class:`workbench.diagnosis.context.RunContext`;
:class:`workbench.diagnosis.run.DiagnosisRun` calls them. Import the modules themselves: this
package's ``__init__`` imports nothing.
"""
