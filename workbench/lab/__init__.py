"""Widgets for JupyterLab over the library (ipywidgets 8): the box console
(:mod:`workbench.lab.console`) and the shared state its panes read (:mod:`workbench.lab.state`).
Widget logic lives here; the notebooks only build and display."""

__all__ = ["BoxState"]

from workbench.lab.state import BoxState
