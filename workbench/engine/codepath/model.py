"""The code-path map's shapes: :class:`PathEntry` (one place on the EAGLE-3 path: file, line, code,
what happens there, where it was looked for when not found) and :class:`CodePathMap` (one engine's
entries in path order, with their dict, text and HTML forms). SGLang's map (:mod:`.build`) and
vLLM's (:mod:`workbench.engine.codepath_vllm`) both build them.

Imports: :mod:`.worker` (:class:`~.worker.WorkerChoice`, the map's ``worker``) and
:mod:`workbench.report.tables` (the HTML table helpers).
"""

from __future__ import annotations

import html
import posixpath
from dataclasses import dataclass, field
from typing import Optional

from workbench.engine.codepath.worker import WorkerChoice
from workbench.report.tables import inline_code, scroll_box

@dataclass(frozen=True)
class PathEntry:
    """One place on the EAGLE-3 path. ``file`` is the absolute path on the box and ``line`` the
    1-based first line of the statement (``None`` for both when ``found`` is false); ``code`` that
    line's text; ``function`` the enclosing function's qualified name; ``detail`` what this
    version does there (e.g. the evaluated offset rule); ``also`` other lines of the same kind;
    ``looked_in`` where it was searched; ``silent`` marks a silent fallback; ``note`` says when the
    file holds workbench probes (its line numbers are then the patched file's); ``also_code``: the
    text of each ``also`` line; ``anchor`` / ``also_anchor``: the first line of the statement
    holding ``line`` / each ``also`` line, where a probe goes (``None`` / empty: the lines
    themselves); ``anchor_code``: the text of the anchor line and of each ``also_anchor`` line
    (empty when the anchors are the lines themselves)."""

    key: str
    what: str
    found: bool
    file: Optional[str] = None
    line: Optional[int] = None
    code: Optional[str] = None
    function: Optional[str] = None
    detail: Optional[str] = None
    also: tuple[int, ...] = ()
    looked_in: str = ""
    silent: bool = False
    note: Optional[str] = None
    also_code: tuple[str, ...] = ()
    anchor: Optional[int] = None
    also_anchor: tuple[int, ...] = ()
    anchor_code: tuple[str, ...] = ()

    @property
    def probe_line(self) -> Optional[int]:
        """The line a probe for this entry goes before: the first line of the statement that holds
        the entry's line (``anchor``), which is ``line`` itself unless the entry names a line inside
        a longer statement (SGLang 0.5.23's capture test is an argument of the layer call at
        ``llama.py:487``, its line 492)."""
        return self.anchor if self.anchor is not None else self.line

    @property
    def location(self) -> str:
        """``file:line``, or ``not found`` with where it was looked for."""
        return f"{self.file}:{self.line}" if self.found else f"not found in this version (looked in {self.looked_in})"

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["also"] = list(self.also)
        d["also_code"] = list(self.also_code)
        d["also_anchor"] = list(self.also_anchor)
        d["anchor_code"] = list(self.anchor_code)
        d["location"] = self.location
        return d


@dataclass
class CodePathMap:
    """The map for one engine: ``root``/``version`` of the package, ``entries`` in path order,
    the ``target_arch``/``draft_arch`` the model-specific entries were read for; ``worker``: the
    EAGLE worker the draft-worker entries were read in (:func:`eagle_worker`); ``engine``:
    ``"sglang"`` (this module's map, also the sandbox's mirror of SGLang) or ``"vllm"``
    (:func:`workbench.engine.codepath_vllm.vllm_code_path_map`); ``runner``: vLLM's model runner
    (``"v1"`` / ``"v2"``) the runner-specific entries were chosen for (``None`` on SGLang);
    ``method``: vLLM's speculative method the draft's class was looked up for (``None`` on SGLang)."""

    root: str
    version: Optional[str]
    target_arch: str
    draft_arch: str
    entries: list[PathEntry] = field(default_factory=list)
    worker: Optional[WorkerChoice] = None
    engine: str = "sglang"
    runner: Optional[str] = None
    method: Optional[str] = None

    def entry(self, key: str) -> PathEntry:
        """The entry ``key``; raises ``KeyError`` naming the known keys."""
        for e in self.entries:
            if e.key == key:
                return e
        raise KeyError(f"no entry {key!r} in the map (entries: {', '.join(e.key for e in self.entries)})")

    @property
    def missing(self) -> list[str]:
        return [e.key for e in self.entries if not e.found]

    def to_dict(self) -> dict:
        return {"engine": self.engine, "root": self.root, "version": self.version, "target_arch": self.target_arch,
                "draft_arch": self.draft_arch, "worker": self.worker.to_dict() if self.worker else None,
                "runner": self.runner, "method": self.method, "entries": [e.to_dict() for e in self.entries]}

    def to_text(self) -> str:
        engine = "" if self.engine == "sglang" else f" ({self.engine}" + (
            f", {self.runner.upper()} model runner)" if self.runner else ")")
        rows = [f"EAGLE-3 code path{engine}: {self.root} (version {self.version or 'unknown'}; "
                f"target {self.target_arch}, draft {self.draft_arch})"]
        if self.worker is not None:
            rows.append(f"draft worker: {self.worker.cls} ({self.worker.file}): {self.worker.why}")
        for i, e in enumerate(self.entries, 1):
            rel = posixpath.relpath(e.file, self.root) if e.file else None
            where = f"{rel}:{e.line}" if e.found else "NOT FOUND in this version"
            rows.append(f"{i:2d}. {e.key:<26} {where}" + ("   [silent]" if e.silent else ""))
            rows.append(f"      {e.what}")
            if e.found and e.code:
                rows.append(f"      | {e.code.strip()}")
            if e.detail:
                rows.append(f"      {e.detail}")
            if e.found and e.also:
                rows.append(f"      also at line(s) {', '.join(map(str, e.also))}")
            if e.note:
                rows.append(f"      note: {e.note}")
            if not e.found:
                rows.append(f"      looked in: {e.looked_in}")
        return "\n".join(rows)

    def _repr_html_(self) -> str:
        head = (f"<h4>EAGLE-3 code path — {html.escape(self.root)} (version "
                f"{html.escape(self.version or 'unknown')})</h4>")
        if self.worker is not None:
            head += (f"<p>draft worker: <code>{html.escape(self.worker.cls)}</code> "
                     f"(<code>{html.escape(self.worker.file)}</code>): {html.escape(self.worker.why)}</p>")
        cell = "text-align:left;vertical-align:top;white-space:normal;overflow-wrap:anywhere"
        body = "".join(
            f"<tr><td style='{cell}'>{html.escape(e.key)}</td><td style='{cell}'><code>"
            f"{html.escape(posixpath.relpath(e.file, self.root) + ':' + str(e.line)) if e.found else 'not found'}"
            f"</code></td><td style='{cell}'>{inline_code(e.what)}"
            f"{'<br><code>' + html.escape(e.code.strip()) + '</code>' if e.found and e.code else ''}"
            f"{'<br>' + inline_code(e.detail) if e.detail else ''}</td></tr>"
            for e in self.entries)
        return head + scroll_box(
            f"<table style='table-layout:fixed;width:100%;min-width:40em'><colgroup><col style='width:14%'>"
            f"<col style='width:26%'><col style='width:60%'></colgroup><tr><th style='{cell}'>entry</th>"
            f"<th style='{cell}'>file:line</th><th style='{cell}'>what happens</th></tr>{body}</table>")
