"""Regenerate the shipped SGLang flag table (``workbench/engine/data/sglang-<version>-flags.json``).

Usage: ``python scripts/gen_sglang_flags.py [VERSION | /path/to/sglang] > workbench/engine/data/sglang-0.5.23-flags.json``.
A version (default ``0.5.23``) is taken from the release cache (:func:`workbench.engine.releases.release_source`,
``pip download --no-deps``, never installed); a path is an unpacked ``sglang/`` package directory.

A thin CLI over :mod:`workbench.engine.flag_table` (the reader the doctor runs on the box's own
engine); :mod:`workbench.engine.flags` loads the file it writes.
"""

from __future__ import annotations

import json
import os
import sys

from workbench.engine.flag_table import read_flag_table_dir
from workbench.engine.releases import release_source

#: The keys of the shipped format (the reader's ``line`` is left out: it changes with every edit).
KEYS = ("aliases", "choices", "deprecated", "field", "kind", "nargs", "new_flag", "note", "required", "source", "type")


def main(arg: str = "0.5.23") -> None:
    pkg = arg if os.path.isdir(arg) else str(release_source(arg))
    table = read_flag_table_dir(pkg)
    doc = {"engine": "sglang", "version": table.version,
           "generated_by": f"scripts/gen_sglang_flags.py from the published sglang=={table.version} wheel",
           "read_from": ["srt/arg_groups/fields/*.py", "srt/server_args.py"] if len(table.files) > 1
           else ["srt/server_args.py"],
           "flags": {f: {k: spec.get(k) for k in KEYS} for f, spec in table.flags.items()}}
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:2])
