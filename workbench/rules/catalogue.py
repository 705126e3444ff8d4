"""The catalogue users read (``docs/rules.md``), generated from the rule registry.

    python -m workbench.rules.catalogue            print it
    python -m workbench.rules.catalogue --write    write docs/rules.md (next to the package's repository)
    python -m workbench.rules.catalogue --check    exit 1 when docs/rules.md differs from the registry

Every rule's row and section come from its :class:`~workbench.rules.registry.Rule` record (id,
family, severities, summary, fix) and its check's docstring (the explanation); a test keeps the
committed file in sync (``tests/workbench/test_rule_registry.py``).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path
from typing import Sequence

from workbench.rules import REGISTRY
from workbench.rules.registry import Registry

__all__ = ["catalogue_markdown", "default_path", "main"]

#: The catalogue's start-up column and line, per :data:`workbench.rules.registry.START_EFFECTS`.
_START = {"never": "—", "always": "fails", "depends": "some"}
_START_TEXT = {"never": "the server starts (the launch is not refused)",
               "always": "an error finding means the server does not start: the launch is refused",
               "depends": "the findings whose mechanism stops start-up (see below) refuse the launch; the others do not"}

_ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj):`~?\.?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def _md(text: str) -> str:
    """Docstring markup (reStructuredText roles and ````literals````) as Markdown code spans."""
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    return _LITERAL.sub(lambda m: f"`{m.group(1)}`", text)


def _cell(text: str) -> str:
    return _md(" ".join(text.split())).replace("|", "\\|")


def _paragraphs(text: str) -> str:
    """A docstring's paragraphs re-flowed for Markdown; lines opening with ``- `` or ``* `` start
    list items (text before the first one stays a lead-in line)."""
    out = []
    for para in text.strip().split("\n\n"):
        lead: list[str] = []
        items: list[list[str]] = []
        for ln in (x.strip() for x in para.splitlines()):
            if ln.startswith(("- ", "* ")):
                items.append([ln[2:]])
            elif items:
                items[-1].append(ln)
            else:
                lead.append(ln)
        block = [_md(" ".join(lead))] if lead else []
        block += [f"- {_md(' '.join(i))}" for i in items]
        out.append("\n".join(block))
    return "\n\n".join(out)


def catalogue_markdown(registry: Registry = REGISTRY) -> str:
    """The catalogue as Markdown: a summary table of every rule (id, family, severity, when it
    fires, the fix it proposes), then one section per family and rule with its explanation (the
    engine facts it encodes and their source) and where it is defined."""
    rules = list(registry)
    lines = [
        "# Preflight rules: the catalogue",
        "",
        "<!-- Generated from the rule registry (workbench/rules/) by `python -m workbench.rules.catalogue --write`;",
        "     tests/workbench/test_rule_registry.py fails when it is stale. Do not edit by hand. -->",
        "",
        "Each rule has a stable id (used in JSON output, tests and reports), a severity (`error`: acceptance or "
        "start-up will fail; `warning`: likely loss; `info`: worth knowing), what it reads and the fix it proposes. "
        "Static rules read the launch command, the target's and the draft's `config.json`, the draft checkpoint's "
        "safetensors headers (and `d2t`/`t2d`, by byte range) and the engine's source on the box; they never load "
        "a model. Runtime rules run on a measurement. Every finding carries its evidence: the values it compared, "
        "with the file (and line, for source) they came from.",
        "",
        "`workbench doctor` exits 0 when no finding is an error, 1 when at least one is, 2 when the doctor itself "
        "could not run (an unreachable box, an unreadable launch command).",
        "",
        f"{len(rules)} rules in {len(registry.families)} families.",
        "",
        "The start-up column says what a rule's error findings mean for a launch: `fails` (the engine raises or "
        "exits while it starts up), `some` (the findings that say so; the others start), `—` (the server starts). "
        "A launch the doctor's findings say will fail to start is refused by the runbooks (no launch is spent on "
        "it) unless `force_launch` is given.",
        "",
        "| id | family | severity | start-up | fires when | proposed fix |",
        "|---|---|---|---|---|---|",
    ]
    for r in rules:
        lines.append(f"| [`{r.id}`](#{r.id}) | {r.family} | {r.severity}{' (runtime)' if r.kind == 'runtime' else ''} "
                     f"| {_START[r.prevents_start]} | {_cell(r.summary)} | {_cell(r.fix)} |")
    for fam in registry.families:
        lines += ["", f"## {fam.name}: {fam.title}", "", f"Module: `{fam.module}`.", "", _paragraphs(fam.description)]
        if fam.hypotheses:
            lines += ["", "Hypotheses the diagnosis tests for this family (`diagnose_acceptance`):", ""]
            for h in fam.hypotheses:
                how = (f"static evidence: {', '.join(f'`{r}`' for r in h.rules)}" if h.static
                       else f"out of static reach; decided by: {_cell(h.decide)}")
                probes = f"; runtime probes: {', '.join(f'`{p}`' for p in h.probes)}" if h.probes else ""
                lines.append(f"- `{h.id}`: {_cell(h.statement)} ({how}{probes})")
        if fam.probes:
            lines += ["", "Runtime probes that show this family's mechanism: "
                      + ", ".join(f"`{p}`" for p in fam.probes) + " (`workbench probe recipes`)."]
        if fam.fixer is not None:
            lines += ["", f"Fixes (`{fam.module}.{fam.fixer.__name__}`): {_paragraphs(inspect.getdoc(fam.fixer) or '')}"]
        for r in fam.rules:
            where = r.runtime_entry or f"{r.module}.{r.check.__name__}"
            lines += ["", f"### `{r.id}`", "",
                      f"- **Severity:** {r.severity}" + (" — a runtime rule, run on a measurement" if r.kind == "runtime"
                                                          else ""),
                      f"- **Fires when:** {_cell(r.summary)}",
                      f"- **Start-up:** {_START_TEXT[r.prevents_start]}",
                      f"- **Engines:** {_engines(r)}",
                      f"- **Proposed fix:** {_cell(r.fix)}",
                      f"- **Defined in:** `{where}`",
                      "", _paragraphs(r.explanation)]
    return "\n".join(lines).rstrip() + "\n"


def _engines(r) -> str:
    """Which engines' launches a rule checks (:attr:`~workbench.rules.registry.Rule.engines`; the sandbox
    box is SGLang's stand-in), and for an SGLang-only rule the vLLM rule that checks the same fault."""
    names = [n for e, n in (("sglang", "SGLang"), ("vllm", "vLLM")) if e in r.engines]
    text = ", ".join(names) or "—"
    if "vllm" not in r.engines:
        text += f" (on vLLM: [`{r.vllm_rule}`](#{r.vllm_rule}))" if r.vllm_rule else " (not checked on vLLM)"
    return text


def default_path() -> Path | None:
    """``docs/rules.md`` of the repository checkout this package lives in; ``None`` for an installed
    package (no ``docs/`` beside it)."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    return docs / "rules.md" if docs.is_dir() else None


def main(argv: Sequence[str] | None = None) -> int:
    """Print, write (``--write [PATH]``) or check (``--check [PATH]``) the catalogue; exit 0, or 1
    when ``--check`` finds the file stale or missing."""
    parser = argparse.ArgumentParser(prog="python -m workbench.rules.catalogue", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", nargs="?", const="", metavar="PATH",
                       help="write the catalogue to PATH (default: docs/rules.md of the checkout)")
    group.add_argument("--check", nargs="?", const="", metavar="PATH",
                       help="exit 1 when PATH (default: docs/rules.md of the checkout) differs from the registry")
    args = parser.parse_args(argv)
    for name in ("write", "check"):
        if getattr(args, name) == "":
            default = default_path()
            if default is None:
                parser.error(f"--{name}: this is an installed package, not a checkout (no docs/ beside it): give PATH")
            setattr(args, name, str(default))
    text = catalogue_markdown()
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
        print(f"wrote {args.write} ({len(list(REGISTRY))} rules)")
        return 0
    if args.check:
        path = Path(args.check)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            print(f"{path} is stale: run `python -m workbench.rules.catalogue --write`", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
