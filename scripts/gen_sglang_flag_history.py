"""Regenerate the shipped SGLang flag history (``workbench/engine/data/sglang-flag-history.json``).

Usage: ``python scripts/gen_sglang_flag_history.py [VERSION ...] > workbench/engine/data/sglang-flag-history.json``.
Default: every release in the release cache (:func:`workbench.engine.releases.release_cache`, the
unpacked ``<version>/sglang`` directories; a version given is downloaded with ``pip download
--no-deps`` when missing, never installed). Each release's table is read by
:mod:`workbench.engine.flag_table` (the reader the doctor runs on the box).

Output: ``releases`` (in order); ``flags``: ``{flag: {field (as first seen), fields (every field
it stored, when it changed), releases, ranges: [[first, last]],
deprecated: {release: note}}}`` (``ranges`` over the releases read: a flag absent from one release
in between has two ranges); ``renames``: ``{old flag: [{new, field, since, how}]}`` where ``how`` is
``new_flag`` (a deprecated alias names its replacement: ``DeprecatedAliasStoreAction(new_flag=…)``),
``field`` (the flag is gone and a new flag stores the same ``ServerArgs`` field) or ``prefix`` (the
flag is gone and new flags extend its name, ``--x`` → ``--x-decode``).
"""

from __future__ import annotations

import json
import sys

from workbench.engine.flag_table import read_flag_table_dir, version_key
from workbench.engine.releases import release_cache, release_source


def _cached() -> list[str]:
    root = release_cache()
    return sorted((p.name for p in root.iterdir() if (p / ".unpacked").exists() and (p / "sglang").is_dir()),
                  key=version_key)


def history(versions: list[str]) -> dict:
    versions = sorted(versions, key=version_key)
    tables = {v: read_flag_table_dir(release_source(v), v) for v in versions}
    flags: dict[str, dict] = {}
    for v in versions:
        for flag, spec in tables[v].flags.items():
            row = flags.setdefault(flag, {"field": spec.get("field"), "fields": [], "releases": [], "deprecated": {}})
            if spec.get("field") and spec["field"] not in row["fields"]:
                row["fields"].append(spec["field"])
            row["releases"].append(v)
            if spec.get("deprecated"):
                note = spec["deprecated"] + (f": use {spec['new_flag']}" if spec.get("new_flag")
                                             else f": {spec['note']}" if spec.get("note") else "")
                row["deprecated"][v] = note
    for row in flags.values():
        ranges: list[list[str]] = []
        idx = [versions.index(v) for v in row["releases"]]
        for k, i in enumerate(idx):
            if k and i == idx[k - 1] + 1:
                ranges[-1][1] = versions[i]
            else:
                ranges.append([versions[i], versions[i]])
        row["ranges"] = ranges
        if not row["deprecated"]:
            del row["deprecated"]
        if len(row["fields"]) < 2:
            del row["fields"]
    renames: dict[str, list[dict]] = {}

    def add(old: str, new: str, field: str | None, since: str, how: str) -> None:
        rows = renames.setdefault(old, [])
        if not any(r["new"] == new for r in rows):
            rows.append({"new": new, "field": field, "since": since, "how": how})

    for v in versions:
        for flag, spec in tables[v].flags.items():
            if spec.get("new_flag"):
                add(flag, spec["new_flag"], spec.get("field"), v, "new_flag")
    for i in range(1, len(versions)):
        before, now = tables[versions[i - 1]].flags, tables[versions[i]].flags
        gone = [f for f in before if f not in now]
        new = [f for f in now if f not in before]
        for f in gone:
            if f in renames:
                continue
            same_field = [n for n in new if now[n].get("field") == before[f].get("field")]
            for n in same_field:
                add(f, n, now[n].get("field"), versions[i], "field")
            if not same_field:
                first = flags[f]["releases"][0]
                longer = [n for n in now if n.startswith(f + "-") and version_key(flags[n]["releases"][0]) > version_key(first)]
                for n in sorted(longer):
                    add(f, n, now[n].get("field"), versions[i], "prefix")
    return {"engine": "sglang",
            "generated_by": "scripts/gen_sglang_flag_history.py from the published sglang wheels "
                            f"({versions[0]} … {versions[-1]}, {len(versions)} releases)",
            "releases": versions, "flags": dict(sorted(flags.items())), "renames": dict(sorted(renames.items()))}


if __name__ == "__main__":
    print(json.dumps(history(sys.argv[1:] or _cached()), indent=1, sort_keys=False))
