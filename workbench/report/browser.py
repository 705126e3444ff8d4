"""Headless Chromium on a report: :func:`render_dom` (the DOM after the page's scripts ran, so a
test or a user can see that plotly.js drew the figures: ``class="main-svg"`` only exists then) and
:func:`screenshot`. Run in its own process group with a time-out; ``$WORKBENCH_CHROMIUM`` picks
the binary."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from workbench.errors import BrowserError, BrowserNotFound, ReportError

__all__ = ["find_chromium", "render_dom", "screenshot", "BrowserNotFound", "BrowserError"]


_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    """Path of a Chromium / Chrome binary: ``$WORKBENCH_CHROMIUM`` if set, else the first of
    chromium, chromium-browser, google-chrome(-stable), chrome on ``PATH``; ``None`` if there is none."""
    explicit = os.environ.get("WORKBENCH_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else shutil.which(explicit)
    for name in _CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _run_chromium(args: list[str], *, chromium: str | None, timeout: float) -> subprocess.CompletedProcess[str]:
    binary = chromium or find_chromium()
    if not binary:
        raise BrowserNotFound(
            "no Chromium binary found (tried $WORKBENCH_CHROMIUM, " + ", ".join(_CHROMIUM_NAMES) + "); "
            "on Debian/Ubuntu: apt-get install -y --no-install-recommends chromium fonts-dejavu-core"
        )
    with tempfile.TemporaryDirectory(prefix="workbench-chromium-") as profile:
        argv = [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--no-first-run",
            "--no-default-browser-check",
            "--mute-audio",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            *args,
        ]
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # its own process group: helpers (zygote, crashpad) die with it
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc.pid)
            stdout, stderr = proc.communicate()
            raise BrowserError(f"chromium timed out after {timeout:g} s", stderr) from exc
        finally:
            _kill_group(proc.pid)
    if proc.returncode != 0:
        raise BrowserError(f"chromium exited with code {proc.returncode}", stderr)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def _kill_group(pgid: int) -> None:
    """Kill what is left of the process group this module started for one Chromium run."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return  # the group already exited: nothing left to stop


def _file_url(html_path: str | os.PathLike[str]) -> str:
    path = Path(html_path).resolve()
    if not path.is_file():
        raise ReportError(f"no such HTML file: {path}")
    return path.as_uri()


def render_dom(
    html_path: str | os.PathLike[str],
    *,
    virtual_time_budget_ms: int = 5000,
    timeout: float = 120.0,
    chromium: str | None = None,
) -> str:
    """Open ``html_path`` in headless Chromium and return the DOM after its scripts ran (``--dump-dom``).

    A plotly figure that plotly.js actually drew contains ``<svg class="main-svg">`` elements, which
    only exist in this run-time DOM, never in the exported file. Network access is not needed and
    background networking is disabled.

    Args:
        virtual_time_budget_ms: virtual time given to the page's scripts, milliseconds.
        timeout: wall-clock limit for the browser, seconds.
        chromium: binary to use (default: :func:`find_chromium`).

    Raises:
        BrowserNotFound: no Chromium binary. BrowserError: it failed or timed out.
        ReportError: ``html_path`` does not exist.
    """
    url = _file_url(html_path)
    proc = _run_chromium(
        [f"--virtual-time-budget={int(virtual_time_budget_ms)}", "--dump-dom", url], chromium=chromium, timeout=timeout
    )
    if "<html" not in proc.stdout.lower():
        raise BrowserError("chromium printed no DOM", proc.stderr)
    return proc.stdout


def screenshot(
    html_path: str | os.PathLike[str],
    png_path: str | os.PathLike[str],
    *,
    window_size: tuple[int, int] = (1280, 1800),
    virtual_time_budget_ms: int = 5000,
    timeout: float = 120.0,
    chromium: str | None = None,
) -> Path:
    """Render ``html_path`` in headless Chromium to a PNG of ``window_size`` (width, height) pixels.

    Raises:
        BrowserNotFound, BrowserError (no PNG written), ReportError (no such HTML file).
    """
    url = _file_url(html_path)
    png = Path(png_path).resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    width, height = window_size
    proc = _run_chromium(
        [
            f"--window-size={int(width)},{int(height)}",
            f"--virtual-time-budget={int(virtual_time_budget_ms)}",
            f"--screenshot={png}",
            url,
        ],
        chromium=chromium,
        timeout=timeout,
    )
    if not png.is_file() or png.stat().st_size == 0:
        raise BrowserError(f"chromium wrote no screenshot to {png}", proc.stderr)
    return png
