"""``scripts/host_speed.py``: the host-speed line ``make test`` prints after the wall time (a
reference step before and after the suite, and the CPUs' idle and stolen shares of the run, from
``/proc/stat``)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("host_speed", ROOT / "scripts" / "host_speed.py")
host_speed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_speed)

#: a real 2-core kernel's /proc/stat head (user nice system idle iowait irq softirq steal guest guest_nice)
STAT_A = "cpu  1000 10 200 500 40 0 5 45 0 0\ncpu0 500 5 100 250 20 0 3 22 0 0\nintr 1 2 3\n"
STAT_B = "cpu  1600 10 300 560 40 0 5 85 0 0\ncpu0 800 5 150 280 20 0 3 42 0 0\nintr 1 2 3\n"


def test_the_cpu_line_is_read_as_proc5_lays_it_out():
    assert host_speed.parse_cpu_line(STAT_A) == {"total": 1800, "idle": 540, "steal": 45}


def test_shares_of_the_ticks_between_two_readings():
    got = host_speed.shares(host_speed.parse_cpu_line(STAT_A), host_speed.parse_cpu_line(STAT_B))
    # 800 ticks passed: 60 idle (idle 560-500, iowait unchanged), 40 stolen (85-45)
    assert got == pytest.approx({"idle_pct": 7.5, "steal_pct": 5.0})


def test_an_old_kernel_without_a_steal_field_reads_as_no_steal():
    assert host_speed.parse_cpu_line("cpu 10 0 5 85\n") == {"total": 100, "idle": 85, "steal": 0}


@pytest.mark.parametrize("text", ["intr 1 2\n", "cpu a b c d\n", "cpu 1 2\n", ""])
def test_a_stat_without_a_usable_cpu_line_is_a_value_error(text):
    with pytest.raises(ValueError, match="cpu"):
        host_speed.parse_cpu_line(text)


def test_the_reference_step_is_cpu_seconds_that_grow_with_the_work():
    small = host_speed.reference_step_s(additions=200_000, repeats=3)
    large = host_speed.reference_step_s(additions=2_000_000, repeats=3)
    assert 0 < small < large


def test_start_then_end_prints_the_line(tmp_path, capsys):
    record = tmp_path / "reports" / "host_speed.json"
    assert host_speed.main(["start", str(record)]) == 0
    saved = json.loads(record.read_text())
    assert saved["reference_s"] > 0 and saved["ticks"]["total"] > 0
    assert host_speed.main(["end", str(record)]) == 0
    line = capsys.readouterr().out.strip()
    m = re.fullmatch(r"make test: host speed: reference step (\d+\.\d\d) s of CPU before, (\d+\.\d\d) s after "
                     r"\(3,000,000 Python additions; lower is faster\); during the run the CPUs were "
                     r"(\d+\.\d) % idle, (\d+\.\d) % stolen", line)
    assert m, line
    assert float(m[1]) == pytest.approx(saved["reference_s"], abs=0.005)
    assert 0 <= float(m[3]) <= 100 and 0 <= float(m[4]) <= 100


def test_end_without_a_start_record_says_which_file(tmp_path):
    missing = tmp_path / "nothing.json"
    with pytest.raises(SystemExit, match=f"cannot read the start record {re.escape(str(missing))}"):
        host_speed.main(["end", str(missing)])
