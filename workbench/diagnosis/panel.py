"""The control panel moved to :mod:`workbench.lab.panel` (the JupyterLab widgets live in
``workbench/lab/``); this name keeps importing it."""

from workbench.lab.panel import STEPS, ControlPanel, control_panel, verdict_html

__all__ = ["STEPS", "ControlPanel", "control_panel", "verdict_html"]
