"""Regenerate the shipped list of vLLM's speculative methods (``workbench/engine/data/vllm-<version>-spec-methods.json``).

Usage: ``python scripts/gen_vllm_spec.py [VLLM_PYTHON] > workbench/engine/data/vllm-0.32.0-spec-methods.json``.
``VLLM_PYTHON`` (default ``$WORKBENCH_VLLM_PYTHON``, else ``.venv-vllm/bin/python``) locates the
``vllm`` package (:data:`workbench.engine.locate.LOCATE_ENGINE_SCRIPT`: ``find_spec``, nothing
imported); its ``config/speculative.py`` is read with :func:`workbench.engine.vllm_spec.read_method_names`
(``ast``), as the doctor reads the box's.
"""

from __future__ import annotations

import json
import sys

from workbench.engine.locate import LOCATE_ENGINE_SCRIPT
from workbench.engine.vllm_spec import read_method_names
from workbench.sandbox_box import vllm_python


def main(python: str | None = None) -> None:
    from remote import connect

    python = python or vllm_python()
    box = connect("local")
    try:
        res = box.run([python, "-B", "-c", LOCATE_ENGINE_SCRIPT, "vllm"], timeout=60)
        found = json.loads(res.stdout.strip().splitlines()[-1])
        if not found.get("root"):
            raise SystemExit(f"vllm not found by {python}: {found.get('error')}")
        names = read_method_names(box, found["root"], found.get("version") or "unknown")
    finally:
        box.close()
    rel = names.source.split("/vllm/", 1)[-1]
    doc = {"engine": "vllm", "version": names.version,
           "generated_by": f"scripts/gen_vllm_spec.py from vllm(-cpu)=={names.version} vllm/{rel} (ast)",
           "read_from": f"vllm/{rel}", "methods": list(names.methods), "eagle": list(names.eagle),
           "mtp_aliases": list(names.mtp_aliases), "config_fields": list(names.config_fields)}
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:2])
