"""The GPU part of the box console's Status tab (:class:`GpuPane`): each GPU's memory, every holder
named (pid, title, user, MiB per GPU; the current server's, another server's, orphans flagged), and
the button "Reclaim my orphaned GPU memory" (:func:`workbench.lab.gpu.reclaim_my_orphans`: only
the box user's own orphaned SGLang processes, never another user's nor a live server's)."""

from __future__ import annotations

import html
from typing import Any, Optional

import ipywidgets as W

from workbench.lab.gpu import GpuReport, reclaim_my_orphans

__all__ = ["GpuPane", "gpu_rows"]


def _esc(x: Any) -> str:
    return html.escape(str(x))


def gpu_rows(gpu: Optional[GpuReport], error: Optional[str] = None) -> list[tuple[str, str]]:
    """The Status table's GPU rows (label, HTML) for ``gpu`` (``None``: it could not be read, ``error`` says why)."""
    if gpu is None:
        return [("GPUs", _esc(error))]
    if not gpu.available:
        return [("GPUs", _esc(gpu.note))]
    src = " <i>(the sandbox box's GPUs)</i>" if gpu.named and gpu.named.snapshot.command.kind == "sandbox" else ""
    g = "<br>".join(f"GPU {x.index} {_esc(x.name)}: {x.used_mib} / {x.total_mib} MiB" for x in gpu.gpus) + src
    leftover = {h.pid for h in gpu.holders if h.leftover}
    rows = []
    for h in (gpu.named.holders if gpu.named else []):
        flag = (" <b class='wb-console-orphan' style='color:#b00'>ORPHAN: left by a launcher that is gone</b>"
                if h.orphan else " <b style='color:#b00'>LEFTOVER: not in the server's process group</b>"
                if h.pid in leftover else "")
        rows.append(f"pid {h.pid} {_esc(h.title[:100])} (user {_esc(h.user or '?')}) {_esc(h.mib_text())}{flag}")
    out = [("GPUs", g), ("GPU memory holders", "<br>".join(rows) or "none")]
    if gpu.note:
        out.append(("GPU query", _esc(gpu.note)))
    return out


class GpuPane:
    """The reclaim button and its outcome for the console (``.widget``); :meth:`reclaim` does what
    the button does, on ``box``: returns :func:`reclaim_my_orphans`' dict, raises its errors."""

    def __init__(self) -> None:
        self.button = W.Button(description="Reclaim my orphaned GPU memory", button_style="warning",
                               layout=W.Layout(width="auto"))
        self.button.add_class("wb-console-reclaim")
        self.outcome = W.HTML()
        self.outcome.add_class("wb-console-reclaim-outcome")
        self.widget = W.VBox([self.button, self.outcome])
        self.last: Optional[dict] = None

    def reclaim(self, box: Any, *, timeout: float) -> dict:
        result = reclaim_my_orphans(box, timeout=timeout)
        self.last = result
        gone = ", ".join(f"pid {h['pid']} {_esc(h['title'])}" for h in result["reclaimed"])
        self.outcome.value = (f"<b>Reclaimed</b> {gone}: {_esc(result['note'])}" if result["reclaimed"]
                              else f"<b>Nothing to reclaim</b>: {_esc(result['note'])}")
        if result["survivors"]:
            self.outcome.value += f"<br><b style='color:#b00'>still alive after SIGKILL</b>: {result['survivors']}"
        return result
