"""JupyterLab widgets (ipywidgets 8) over the library: the box console's panes."""
