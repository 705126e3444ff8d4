"""Write ``tests/durations.json`` from a pytest JUnit XML report: the seconds each test FILE took
(setup + call + teardown of its tests, summed), which ``tests/conftest.py`` uses to run the
longest files first, so that no long file starts last and leaves the other workers idle (the
suite's wall time is then close to its total time divided by the workers).

    python scripts/test_durations.py reports/junit.xml            # writes tests/durations.json
    python scripts/test_durations.py reports/junit.xml --out F

``make test`` writes ``reports/junit.xml`` on every run. Files missing from the report keep the
figure they had. Raises ``SystemExit`` with a message when the report cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def file_seconds(junit: Path) -> dict[str, float]:
    """``{"tests/x/test_y.py": seconds}`` from a JUnit XML report (pytest's ``--junitxml``: each
    ``testcase`` has ``classname`` ``tests.x.test_y[.Class]`` and ``time`` in seconds).
    Raises ``ValueError`` for a file that is not such a report."""
    try:
        tree = ET.parse(junit)
    except (ET.ParseError, OSError) as exc:
        raise ValueError(f"{junit}: not a JUnit XML report ({exc})") from exc
    out: dict[str, float] = defaultdict(float)
    for case in tree.iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        for cut in range(len(parts), 0, -1):  # tests.x.test_y.Class -> tests/x/test_y.py
            rel = "/".join(parts[:cut]) + ".py"
            if (ROOT / rel).is_file():
                out[rel] += float(case.get("time") or 0.0)
                break
    if not out:
        raise ValueError(f"{junit}: no test case of this repository's tests")
    return dict(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "durations.json")
    args = ap.parse_args(argv)
    try:
        seconds = file_seconds(args.junit)
    except ValueError as exc:
        raise SystemExit(f"test_durations: {exc}")
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    merged = {**old, **{k: round(v, 1) for k, v in seconds.items()}}
    merged = {k: merged[k] for k in sorted(merged) if (ROOT / k).is_file()}
    args.out.write_text(json.dumps(merged, indent=1) + "\n")
    total = sum(merged.values())
    print(f"{args.out}: {len(merged)} files, {total / 60:.1f} min of tests in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
