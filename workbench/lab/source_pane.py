"""The box console's source viewer: :class:`SourcePane` shows the running engine's source around a
``file:line`` (``workbench.engine.source.EngineSource.show``), the code-path map's entries one click
away, and a ``Class.method`` finder (``EngineSource.find_definition``)."""

from __future__ import annotations

import html
from typing import Any, Optional

import ipywidgets as W

from workbench.lab.clicks import clicks_of

__all__ = ["SourcePane", "parse_location"]


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def parse_location(text: str) -> tuple[str, int]:
    """``"path:line"`` -> ``(path, line)`` (line 1-based; the path absolute on the box or relative to
    the engine root). Raises :class:`workbench.errors.SourceLookupError` saying what was wrong when
    the text has no ``:line`` or the line is no positive number."""
    from workbench.errors import SourceLookupError

    path, sep, line = (text or "").strip().rpartition(":")
    if not sep or not path or not line.strip().isdigit() or int(line) < 1:
        raise SourceLookupError(f"not a file:line location: {text!r} (e.g. srt/models/llama_eagle3.py:120)")
    return path.strip(), int(line)


class SourcePane:
    """The running engine's source: a ``file:line`` box and a context slider, the code-path map's
    entries (one button each), and a ``Class.method`` finder.

    ``state``: a :class:`workbench.lab.state.BoxState` (``.source()``: the server's
    ``EngineSource``; ``.code_path()``: its code-path map). ``context``: lines shown each side
    (default 8). Methods the buttons call: :meth:`show` (``path, line``) returns the
    ``SourceExcerpt`` shown, :meth:`show_entry` (a map key), :meth:`find` (a name) returns the
    ``Definition`` list; :meth:`refresh` re-reads the map into the entry buttons. None raises: an
    error (``SourceLookupError``, no server, a box error) is shown in ``wb-source-status`` as its
    type and message and ``None`` is returned.

    The view (``wb-source-view``) is an HTML ``<pre>``: ``NNN | text`` per line, the asked line
    marked ``>`` and highlighted (``wb-source-focus``). Entry buttons have class ``wb-source-entry``
    and ``wb-source-entry-<key>``; an entry not found in this engine version is a disabled button
    saying so. Other classes: ``wb-source-location``, ``wb-source-context``, ``wb-source-show``,
    ``wb-source-find``, ``wb-source-find-button``, ``wb-source-found``.
    """

    def __init__(self, state, *, context: int = 8):
        self.state = state
        self._clicks = clicks_of(state)  # a click queued while an action ran is dropped
        self.location = W.Text(placeholder="file:line (e.g. srt/models/llama_eagle3.py:120)", description="Where",
                               layout=W.Layout(width="50%"))
        self.location.add_class("wb-source-location")
        self.context = W.IntSlider(value=context, min=0, max=60, description="Context")
        self.context.add_class("wb-source-context")
        self.show_button = W.Button(description="Show source", layout=W.Layout(width="auto"))
        self.show_button.add_class("wb-source-show")
        self.find_text = W.Text(placeholder="Class.method or function", description="Find",
                                layout=W.Layout(width="40%"))
        self.find_text.add_class("wb-source-find")
        self.find_button = W.Button(description="Find definition", layout=W.Layout(width="auto"))
        self.find_button.add_class("wb-source-find-button")
        self.found = W.VBox([])
        self.found.add_class("wb-source-found")
        self.entries = W.VBox([])
        self.entries.add_class("wb-source-entries")
        self.status = W.HTML("")
        self.status.add_class("wb-source-status")
        self.view = W.HTML("<pre></pre>", layout=W.Layout(max_height="500px", overflow="auto"))
        self.view.add_class("wb-source-view")
        self.current: Optional[tuple[str, int]] = None
        self.show_button.on_click(self._clicks.handler("show source", self.show_location))
        self.find_button.on_click(self._clicks.handler("find definition", self.find))
        self.context.observe(self._on_context, names="value")
        self.widget = W.VBox([
            W.HBox([self.location, self.context, self.show_button], layout=W.Layout(flex_flow="row wrap")),
            W.HBox([self.find_text, self.find_button], layout=W.Layout(flex_flow="row wrap")),
            self.found, W.HTML("<b>Code-path map</b> (click an entry to show its source)"), self.entries,
            self.status, self.view])

    def _fail(self, exc: BaseException) -> None:
        self.status.value = f"<b>{_esc(type(exc).__name__)}</b>: {_esc(str(exc))}"

    def _on_context(self, _change) -> None:
        if self.current is not None:
            self.show(*self.current)

    def refresh(self) -> Optional[Any]:
        """Re-read the code-path map of the running server into the entry buttons; returns the map
        (``workbench.engine.codepath.CodePathMap``), ``None`` on an error (shown)."""
        try:
            cmap = self.state.code_path()
        except Exception as exc:  # noqa: BLE001 - shown in the pane
            self.entries.children = ()
            self._fail(exc)
            return None
        buttons = []
        for e in cmap.entries:
            label = f"{e.key}: {e.file.rsplit('/', 1)[-1]}:{e.line}" if e.found else f"{e.key}: not found here"
            b = W.Button(description=label, tooltip=e.what, disabled=not e.found, layout=W.Layout(width="auto"))
            b.add_class("wb-source-entry")
            b.add_class(f"wb-source-entry-{e.key}")
            b.on_click(self._clicks.handler(f"show {e.key}", lambda key=e.key: self.show_entry(key)))
            buttons.append(b)
        self.entries.children = tuple(buttons)
        self.status.value = _esc(f"{len(cmap.entries)} code-path entries ({len(cmap.missing)} not found) in "
                                 f"{cmap.root} {cmap.version or ''}")
        return cmap

    def show_location(self):
        """Show the Where box's ``file:line`` (:func:`parse_location`); the excerpt or ``None``."""
        try:
            path, line = parse_location(self.location.value)
        except Exception as exc:  # noqa: BLE001 - shown in the pane
            self._fail(exc)
            return None
        return self.show(path, line)

    def show(self, path: str, line: int, context: Optional[int] = None):
        """Show lines ``line ± context`` of ``path`` (absolute on the box or relative to the engine
        root) with line ``line`` highlighted; returns the ``SourceExcerpt`` (``None`` on an error)."""
        context = self.context.value if context is None else int(context)
        from workbench.errors import SourceLookupError

        try:
            source = self.state.source()
            try:
                excerpt = source.show(path, int(line), context)
            except SourceLookupError as exc:
                note = self._probes_note(source.path(path)) if "is outside" in str(exc) else ""
                if not note:
                    raise
                core = str(exc)
                if exc.where and core.endswith(f" ({exc.where})"):
                    core = core[: -len(exc.where) - 3]
                raise SourceLookupError(core + note, where=exc.where) from None
        except Exception as exc:  # noqa: BLE001 - shown in the pane
            self._fail(exc)
            return None
        self.current = (excerpt.file, excerpt.focus)
        self.location.value = f"{excerpt.file}:{excerpt.focus}"
        width = len(str(excerpt.last))
        rows = []
        for n, text in enumerate(excerpt.lines, start=excerpt.first):
            row = _esc(f"{'>' if n == excerpt.focus else ' '} {n:>{width}} | {text}")
            rows.append(f'<span class="wb-source-focus" style="background:#fff3b0;font-weight:bold">{row}</span>'
                        if n == excerpt.focus else row)
        self.view.value = "<pre>" + "\n".join(rows) + "</pre>"
        self.status.value = _esc(f"{excerpt.file}:{excerpt.focus} (lines {excerpt.first}-{excerpt.last})"
                                 + self._probes_note(excerpt.file))
        return excerpt

    def _probes_note(self, path: str) -> str:
        """``" · this file has N probe(s) …"`` when ``path`` holds probe blocks (its line numbers
        are then the patched file's; the original's line count given), else ``""``."""
        from remote import probes

        text = self.state.box.read_text(path, timeout=30)
        blocks = probes.probe_blocks(text)
        if not blocks:
            return ""
        return (f" · this file has {len(blocks)} probe(s) in it: the line numbers are the file's with them "
                f"({len(text.splitlines())} lines; {probes.original_line_count(text)} in the original file)")

    def show_entry(self, key: str):
        """Show the code-path entry ``key``'s line (e.g. ``draft-fc-width-check``); the excerpt, or
        ``None`` (an unknown key or an entry not found in this engine version: said in the status)."""
        try:
            entry = self.state.code_path().entry(key)
            if not entry.found:
                from workbench.errors import SourceLookupError

                raise SourceLookupError(f"code-path entry {key} is not in this engine version "
                                        f"(looked in {entry.looked_in or 'the engine source'})")
        except Exception as exc:  # noqa: BLE001 - shown in the pane
            self._fail(exc)
            return None
        excerpt = self.show(entry.file, entry.line)
        if excerpt is not None:
            self.status.value = _esc(f"{key}: {entry.what} · {excerpt.file}:{excerpt.focus}"
                                     + (f" · {entry.detail}" if entry.detail else "")
                                     + (f" · {entry.note}" if entry.note else "") + self._probes_note(excerpt.file))
        return excerpt

    def find(self, name: Optional[str] = None) -> Optional[list]:
        """Find ``name`` (default: the Find box's; ``Class.method``, a function or class) in the
        engine (``EngineSource.find_definition``); lists them as buttons (``wb-source-found``), shows
        the first; returns the ``Definition`` list (``None`` on an error, e.g. nothing found)."""
        name = (name if name is not None else self.find_text.value).strip()
        try:
            from workbench.errors import SourceLookupError

            if not name:
                raise SourceLookupError("nothing to find: give a Class.method, function or class name")
            defs = self.state.source().find_definition(name)
            if not defs:
                raise SourceLookupError(f"no definition of {name} in the engine source")
        except Exception as exc:  # noqa: BLE001 - shown in the pane
            self.found.children = ()
            self._fail(exc)
            return None
        buttons = []
        for d in defs:
            b = W.Button(description=f"{d.kind} {d.qualname}: {d.file.rsplit('/', 1)[-1]}:{d.line}",
                         tooltip=str(d), layout=W.Layout(width="auto"))
            b.add_class("wb-source-found-item")
            b.on_click(self._clicks.handler(f"show {d.qualname}", lambda d=d: self.show(d.file, d.line)))
            buttons.append(b)
        self.found.children = tuple(buttons)
        self.show(defs[0].file, defs[0].line)
        return defs
