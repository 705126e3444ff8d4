"""``scripts/host_speed.py``: the host-speed line ``make test`` prints after the wall time (a
reference step before and after the suite, and the CPUs' idle and stolen shares of the run, from
``psutil.cpu_times()``)."""

from __future__ import annotations

import importlib.util
import json
import re
from collections import namedtuple
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("host_speed", ROOT / "scripts" / "host_speed.py")
host_speed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_speed)

#: two psutil.cpu_times() readings of a 2-core Linux machine, in seconds (the fields in
#: /proc/stat's order: user nice system idle iowait irq softirq steal guest guest_nice)
_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
CpuTimes = namedtuple("scputimes", _FIELDS)
TIMES_A = CpuTimes(1000.0, 10.0, 200.0, 500.0, 40.0, 0.0, 5.0, 45.0, 7.0, 0.0)
TIMES_B = CpuTimes(1600.0, 10.0, 300.0, 560.0, 40.0, 0.0, 5.0, 85.0, 9.0, 0.0)


def test_cpu_seconds_count_guest_time_once_and_iowait_as_idle():
    assert host_speed.cpu_seconds(TIMES_A) == {"total": 1800.0, "idle": 540.0, "steal": 45.0}


def test_shares_of_the_time_between_two_readings():
    got = host_speed.shares(host_speed.cpu_seconds(TIMES_A), host_speed.cpu_seconds(TIMES_B))
    # 800 s passed: 60 idle (idle 560-500, iowait unchanged), 40 stolen (85-45)
    assert got == pytest.approx({"idle_pct": 7.5, "steal_pct": 5.0})


def test_a_platform_without_steal_or_iowait_reads_as_none_of_them():
    Mac = namedtuple("scputimes", ("user", "nice", "system", "idle"))
    assert host_speed.cpu_seconds(Mac(10.0, 0.0, 5.0, 85.0)) == {"total": 100.0, "idle": 85.0, "steal": 0.0}


def test_this_machine_reads_as_psutil_sees_it():
    now = host_speed.cpu_ticks()
    assert now["total"] > 0 and 0 <= now["idle"] <= now["total"] and 0 <= now["steal"] <= now["total"]


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
