"""The box console's probes: :class:`ProbesPane` lists the probes on the box, adds a recipe or an
expression, reverts one or all, and reads back what they printed into the current server's log.

Every add and revert goes through ``remote.probes`` (``add_probe`` / ``revert_probe``), which keeps
the box's probe journal with the original file's bytes, exactly as ``workbench probe add`` and
``workbench probe revert`` do, so "put the box back" (``workbench restore``) reverts what the pane
added.
"""

from __future__ import annotations

import html
from typing import Any, Optional

import ipywidgets as W

from workbench.lab.clicks import clicks_of

__all__ = ["ProbesPane", "reading_rows"]


def _esc(text: str) -> str:
    """``text`` escaped for HTML element content (quotes kept as they are)."""
    return html.escape(text, quote=False)


class ProbesPane:
    """The probes on the box: list, add a recipe or an expression, revert one or all, read back.

    ``state``: a :class:`workbench.lab.state.BoxState` (uses ``.box``, ``.engine()`` for the
    interpreter that compiles the patched file, ``.code_path()`` for the recipes' anchors,
    ``.server()`` / ``.log_path()`` for the readings); ``timeout``: seconds for each box call.

    Methods the buttons call: :meth:`add_recipe` (the Dropdown's recipe name: ``workbench.engine.RECIPES``,
    or ``VLLM_RECIPES`` on a vLLM server, refreshed with the listing,
    :func:`workbench.engine.recipes.add_recipes`), :meth:`add_expression` (file, line, expressions:
    :func:`remote.probes.add_probe`), :meth:`revert` (one tag), :meth:`revert_all`,
    :meth:`read_back` (:func:`workbench.engine.recipes.read_recipes` on the current server's log,
    that launch's lines only). Line numbers are those of the file as it is now (with the probes
    already in it, as the code-path map and the Source tab show them); an anchor error on a file
    with probes says so, with its line count without them. Each returns its result and never raises: an error is shown in the
    status line (``wb-probes-status``) as its type and message and the method returns ``None``.
    A probe prints only after the server restarts (it loads the patched file); the pane says so.

    CSS classes: ``wb-probes-list`` (the listing), ``wb-probes-recipe`` (Dropdown),
    ``wb-probes-add`` (Add recipe), ``wb-probes-file`` / ``wb-probes-line`` / ``wb-probes-exprs`` /
    ``wb-probes-add-expr`` (an expression probe), ``wb-probes-tag`` (Dropdown of the listed tags),
    ``wb-probes-revert``, ``wb-probes-revert-all``, ``wb-probes-read``, ``wb-probes-readings``,
    ``wb-probes-refresh``, ``wb-probes-status``.
    """

    def __init__(self, state, *, timeout: float = 60):
        from workbench.engine.recipes import RECIPES

        self.state, self.timeout = state, timeout
        self.probes: list = []
        auto = W.Layout(width="auto")
        self.recipe = W.Dropdown(options=list(RECIPES), description="Recipe")
        self.recipe.add_class("wb-probes-recipe")
        self.add_button = W.Button(description="Add recipe probe", layout=auto)
        self.add_button.add_class("wb-probes-add")
        self.file = W.Text(placeholder="engine file (absolute, or relative to the engine root)", description="File",
                           layout=W.Layout(width="40%"))
        self.file.add_class("wb-probes-file")
        self.line = W.BoundedIntText(value=1, min=1, max=10 ** 7, description="Line", layout=W.Layout(width="160px"))
        self.line.add_class("wb-probes-line")
        self.exprs = W.Text(placeholder="expressions to print, comma-separated", description="Print",
                            layout=W.Layout(width="30%"))
        self.exprs.add_class("wb-probes-exprs")
        self.add_expr_button = W.Button(description="Add expression probe", layout=auto)
        self.add_expr_button.add_class("wb-probes-add-expr")
        self.tag = W.Dropdown(options=[], description="Probe")
        self.tag.add_class("wb-probes-tag")
        self.revert_button = W.Button(description="Revert this probe", layout=auto)
        self.revert_button.add_class("wb-probes-revert")
        self.revert_all_button = W.Button(description="Revert all probes", layout=auto)
        self.revert_all_button.add_class("wb-probes-revert-all")
        self.read_button = W.Button(description="Read what they printed", layout=auto)
        self.read_button.add_class("wb-probes-read")
        self.refresh_button = W.Button(description="Refresh", layout=auto)
        self.refresh_button.add_class("wb-probes-refresh")
        self.status = W.HTML("")
        self.status.add_class("wb-probes-status")
        self.listing = W.HTML("<pre></pre>", layout=W.Layout(overflow="auto"))
        self.listing.add_class("wb-probes-list")
        self.readings = W.HTML("", layout=W.Layout(max_height="300px", overflow="auto"))
        self.readings.add_class("wb-probes-readings")
        self._buttons = [self.add_button, self.add_expr_button, self.revert_button, self.revert_all_button,
                         self.read_button, self.refresh_button]
        clicks = clicks_of(state)  # a click queued while an action ran is dropped (workbench.lab.clicks)
        self.add_button.on_click(clicks.handler("add recipe probe", self.add_recipe))
        self.add_expr_button.on_click(clicks.handler("add expression probe", self.add_expression))
        self.revert_button.on_click(clicks.handler("revert this probe", self.revert))
        self.revert_all_button.on_click(clicks.handler("revert all probes", self.revert_all))
        self.read_button.on_click(clicks.handler("read what they printed", self.read_back))
        self.refresh_button.on_click(clicks.handler("refresh probes", self.refresh))
        self.widget = W.VBox([
            W.HBox([self.recipe, self.add_button]),
            W.HBox([self.file, self.line, self.exprs, self.add_expr_button], layout=W.Layout(flex_flow="row wrap")),
            W.HBox([self.tag, self.revert_button, self.revert_all_button, self.read_button, self.refresh_button],
                   layout=W.Layout(flex_flow="row wrap")),
            self.status, self.listing, self.readings])

    # -- running an action ---------------------------------------------------------------------

    def _run(self, progress: str, fn, *args, **kwargs) -> Any:
        """Run ``fn`` with the buttons disabled and ``progress`` in the status; an exception is
        shown in the status (type and message) and ``None`` returned."""
        for b in self._buttons:
            b.disabled = True
        self.status.value = _esc(progress)
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - shown in the pane, as the conventions require
            self.status.value = f"<b>{_esc(type(exc).__name__)}</b>: {_esc(str(exc))}"
            return None
        finally:
            for b in self._buttons:
                b.disabled = False

    def _python(self) -> Optional[str]:
        """The engine's interpreter (compiles the patched file on the box)."""
        return self.state.engine().python

    # -- the buttons' actions ------------------------------------------------------------------

    def refresh(self) -> Optional[list]:
        """Re-read the probes on the box (``remote.probes.list_probes``) into the listing; returns
        them (``remote.probes.Probe`` list, oldest first), ``None`` on an error (shown)."""
        return self._run("reading the probes…", self._refresh)

    def _refresh(self) -> list:
        from remote import probes

        self._engine_recipes()
        self.probes = probes.list_probes(self.state.box, timeout=self.timeout)
        rows = []
        for p in self.probes:
            status, _sha = probes.probe_file_status(self.state.box, p, others=self.probes, timeout=self.timeout)
            rows.append(f"{p.tag}  [{p.state}]  {p.path}:{p.line}" + (f"  (in {p.function})" if p.function else "")
                        + f"\n    prints: {', '.join(p.exprs)}\n    file: {status}")
        self.listing.value = "<pre>" + _esc("\n".join(rows) if rows else "no probes on the box") + "</pre>"
        tags = [p.tag for p in self.probes]
        self.tag.options = tags
        self.tag.value = tags[-1] if tags else None
        self.status.value = _esc(f"{len(tags)} probe(s) on {self.state.box.name}")
        return self.probes

    def _engine_recipes(self) -> None:
        """The recipe Dropdown holds the running server's engine's recipes
        (:func:`workbench.engine.recipes.recipes_for`: SGLang's, or vLLM's on a vLLM server);
        unchanged when the state cannot tell the engine."""
        from workbench.engine.recipes import recipes_for

        name_fn = getattr(self.state, "engine_name", None)
        if not callable(name_fn):
            return
        names = list(recipes_for(name_fn()))
        if list(self.recipe.options) != names:
            self.recipe.options = names
            self.recipe.value = names[0] if names else None

    def add_recipe(self, name: Optional[str] = None) -> Optional[list]:
        """Add the probes of recipe ``name`` (default: the Dropdown's), anchored on the running
        server's code-path map; returns the journalled ``Probe`` list (``None`` on an error)."""
        name = name or self.recipe.value
        return self._run(f"adding recipe {name}…", self._add_recipe, name)

    def _add_recipe(self, name: str) -> list:
        from workbench.engine.recipes import add_recipes

        added = add_recipes(self.state.box, self.state.code_path(), [name], python=self._python(),
                            timeout=self.timeout)
        self._refresh()
        self.status.value = _esc(
            f"added {', '.join(p.tag for p in added)} ({added[0].path}:{added[0].line}); it prints after the "
            "server restarts (the running server has the old file loaded)")
        return added

    def add_expression(self, file: Optional[str] = None, line: Optional[int] = None,
                       exprs: Optional[list[str]] = None, tag: Optional[str] = None):
        """Add a probe printing ``exprs`` before line ``line`` (1-based) of ``file`` in the engine
        (default: the pane's fields; a relative path is taken under the engine root); ``tag``
        default ``<file stem>-L<line>`` as the CLI makes it. Returns the ``Probe`` (``None`` on
        an error, e.g. no expression, a file outside the engine, a line that is no statement)."""
        file = file if file is not None else self.file.value.strip()
        line = int(line if line is not None else self.line.value)
        if exprs is None:
            exprs = [e.strip() for e in self.exprs.value.split(",") if e.strip()]
        return self._run(f"adding a probe at {file}:{line}…", self._add_expression, file, line, list(exprs), tag)

    def _add_expression(self, file: str, line: int, exprs: list[str], tag: Optional[str]):
        from remote import probes
        from workbench.errors import WorkbenchError

        if not file:
            raise WorkbenchError("no file given: the engine file to probe (absolute, or under the engine root)")
        if not exprs:
            raise WorkbenchError("no expression given: what the probe prints (comma-separated)")
        engine = self.state.engine()
        box = self.state.box
        import posixpath

        path = file if file.startswith(("/", "~")) else posixpath.join(str(engine.root), file)
        real = probes.resolve_probe_path(box, box.expand_path(path), engine.root, timeout=self.timeout)
        if tag is None:
            taken = {p.tag for p in probes.list_probes(box, timeout=self.timeout)}
            tag = probes.default_tag(real, line, taken)
        try:
            probe = probes.add_probe(box, real, before=line, exprs=exprs, tag=tag, python=engine.python,
                                     root=engine.root, timeout=self.timeout)
        except probes.AnchorNotFound as exc:
            raise self._with_probes_said(exc, real) from None
        self._refresh()
        self.status.value = _esc(f"added {probe.tag} ({probe.path}:{probe.line}); it prints after the "
                                        "server restarts")
        return probe

    def _with_probes_said(self, exc: BaseException, path: str) -> BaseException:
        """``exc`` (an ``AnchorNotFound`` for a line of ``path``), its message saying, when the file
        holds probes, how many and the line counts with and without them: line numbers here are
        the file's as it is now (the code-path map and the Source tab show the same numbers)."""
        from remote import probes

        box = self.state.box
        text = box.read_text(path, timeout=self.timeout)
        blocks = probes.probe_blocks(text)
        if not blocks:
            return exc
        core = str(exc)
        if core.startswith(f"[{box.name}] "):
            core = core[len(box.name) + 3:]
        if core.endswith(f": {path}"):
            core = core[: -len(path) - 2]
        return probes.AnchorNotFound(
            f"{core} — the file has {len(blocks)} probe(s) in it: {len(text.splitlines())} lines now, "
            f"{probes.original_line_count(text)} in the original file; line numbers here are the file's as it is "
            "now, with the probes (as the code-path map and the Source tab show them)", path=path, box=box.name)

    def revert(self, tag: Optional[str] = None):
        """Revert probe ``tag`` (default: the Dropdown's): the file restored byte for byte; returns
        the reverted ``Probe`` (``None`` on an error, e.g. ``ProbeConflict`` when someone else
        edited the file)."""
        tag = tag or self.tag.value
        return self._run(f"reverting {tag}…", self._revert, tag)

    def _revert(self, tag: Optional[str]):
        from remote import probes
        from workbench.errors import WorkbenchError

        if not tag:
            raise WorkbenchError("no probe chosen to revert (the list is empty)")
        entry = probes.revert_probe(self.state.box, tag, timeout=self.timeout)
        sha = self.state.box.sha256(entry.path, timeout=self.timeout)
        self._refresh()
        same = "matches the original's" if sha == entry.original_sha256 else "DOES NOT match the original's"
        self.status.value = _esc(f"reverted {entry.tag}: {entry.path} restored (sha256 {sha[:16]}… {same})")
        return entry

    def revert_all(self) -> Optional[list]:
        """Revert every probe on the box, newest first; returns the reverted ``Probe`` list
        (``None`` on an error: the ones before it are reverted, the listing says what is left)."""
        return self._run("reverting all probes…", self._revert_all)

    def _revert_all(self) -> list:
        from remote import probes

        done = []
        try:
            for p in reversed(probes.list_probes(self.state.box, timeout=self.timeout)):
                done.append(probes.revert_probe(self.state.box, p.tag, timeout=self.timeout))
        finally:
            self._refresh()
        self.status.value = _esc(f"reverted {len(done)} probe(s): " + (", ".join(p.tag for p in done) or "none"))
        return done

    def read_back(self) -> Optional[dict]:
        """What the listed probes printed into the current server's log, that launch's lines only
        (:func:`workbench.engine.recipes.read_recipes`): ``{recipe or tag: [ProbeReading]}``,
        shown per probe (``None`` on an error, e.g. no server running)."""
        return self._run("reading the probes' lines…", self._read_back)

    def _read_back(self) -> dict:
        from workbench.engine.recipes import read_recipes
        from workbench.errors import WorkbenchError

        server = self.state.server()
        if server is None or not server.log_path:
            raise WorkbenchError("no server running with a log file to read the probes' lines from")
        self._refresh()
        got = read_recipes(self.state.box, server.log_path, self.probes, pgid=server, timeout=self.timeout)
        self.readings.value = "<pre>" + _esc("\n".join(reading_rows(got)) or "no probes") + "</pre>"
        self.status.value = _esc(f"read {server.log_path}")
        return got


def reading_rows(got: dict) -> list[str]:
    """The Probes pane's readout of ``got`` (``{recipe or tag: [remote.probes.ProbeReading]}``, as
    :func:`workbench.engine.recipes.read_recipes` returns it), as text lines: per probe its line
    count, what the recipes whose reading has a meaning mean in words (``draft-d2t``: is the hot
    token map loaded; ``draft-weights-unmatched``: the checkpoint tensors ``load_weights``
    dropped — the diagnosis's own wording, :func:`workbench.diagnosis.words.d2t_words` /
    :func:`~workbench.diagnosis.words.unmatched_words`), then the last 5 printed values as printed."""
    from workbench.diagnosis.words import d2t_words, unmatched_words
    from workbench.engine.recipes import missing_required, weights_unmatched

    rows = []
    for name, readings in got.items():
        rows.append(f"{name}: {len(readings)} line(s)" + ("" if readings else
                                                          " (none yet: restart the server, send a request)"))
        good = [r for r in readings if not r.error]
        if name == "draft-d2t" and good:
            rows.append("    means: " + d2t_words(good[0].raw))
        elif name == "draft-weights-unmatched" and readings and not missing_required(name, readings):
            rows.append("    means: " + unmatched_words(weights_unmatched(readings)))
        for r in readings[-5:]:
            rows.append("    " + (f"error: {r.error}" if r.error else
                                  " ".join(f"{k}={v!r}" for k, v in r.values.items())))
    return rows
