"""The browser harness itself (tests/lab/labkit.py): a notebook with an ipywidgets Button (CSS
class ``wb-harness-go``) and a Label in a real JupyterLab, run all, click the button in Chromium:
the click goes to the kernel and the Label's new value comes back to the page (a real widget round
trip), no error outputs, a screenshot saved."""

from __future__ import annotations

import nbformat

CELLS = [
    "import ipywidgets as w\n"
    "clicks = []\n"
    "label = w.Label('not clicked yet')\n"
    "label.add_class('wb-harness-label')\n"
    "button = w.Button(description='Say hello', layout=w.Layout(width='auto'))\n"
    "button.add_class('wb-harness-go')\n"
    "def on_click(_):\n"
    "    clicks.append(1)\n"
    "    label.value = f'hello from the kernel, click {len(clicks)}'\n"
    "button.on_click(on_click)\n"
    "w.VBox([button, label])",
    "name = 'world'  # a parameter the harness injects over",
    "greeting = w.Label(f'parameter name = {name}')\n"
    "greeting.add_class('wb-harness-param')\n"
    "greeting",
]


def _notebook(path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nb.cells[1].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def test_widget_round_trip_in_real_jupyterlab(lab, lab_server, tmp_path):
    copy = lab.open(_notebook(tmp_path / "harness.ipynb"), parameters={"name": "lab"})
    assert copy.parent == lab_server.root and copy.exists()
    lab.run_all(timeout=120)
    assert lab.text(".wb-harness-label") == "not clicked yet"
    assert lab.text(".wb-harness-param") == "parameter name = lab"  # injected after the parameters cell
    lab.click(".wb-harness-go")
    assert lab.wait_for_text(".wb-harness-label", "click 1", timeout=30) == "hello from the kernel, click 1"
    lab.click(".wb-harness-go")
    lab.wait_for_text(".wb-harness-label", "click 2", timeout=30)
    assert lab.errors() == []
    shot = lab.screenshot("lab-harness")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5000


def test_errors_are_seen_and_kernel_shut_down(lab, lab_server, tmp_path):
    """``errors()`` is not blind: a cell that raises shows its traceback; and ``close`` shuts the
    kernel down and removes the copy."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("raise ValueError('boom from the harness test')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "fails.ipynb")
    copy = lab.open(tmp_path / "fails.ipynb")
    lab.run_all(timeout=60)
    errs = lab.errors()
    assert any("ValueError" in e and "boom from the harness test" in e for e in errs), errs
    kernel = lab.kernel_id
    lab.close()
    assert not copy.exists()
    assert all(k["id"] != kernel for k in lab_server.api("GET", "/api/kernels"))
    lab.name = None  # closed already: the fixture's close has nothing left to do but the page
