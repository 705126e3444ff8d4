"""The load of tests/integration/test_verdicts_under_load.py (``testkit.cpuload``): a CPU quota on the
test's own process tree slows a calibration step at least 2x, in this process and in a process it
starts, and the process is back in its own cgroup afterwards, whatever happened inside.

Real cgroups: a child of this process's cgroup in the hierarchy holding the ``cpu`` controller
(cgroup v1 here and in CI; v2 ``cpu.max`` where that is what the machine has). Skipped, saying
why, only where this process has no writable ``cpu`` controller (the test then falls back to busy
loops and says so).
"""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from remote.readiness import MIN_CPU_PROGRESS_S
from testkit.cpuload import MIN_QUOTA_CPUS, CgroupUnavailable, CpuQuota, find_cpu_controller, slowing_load


@pytest.fixture
def controller():
    try:
        return find_cpu_controller()
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))


def _threads_dirs(controller) -> set:
    """The cgroup dirs of this process's threads; a thread that ends between the listing and the
    read (another fixture's helper thread) is not one of them."""
    dirs = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            dirs.add(controller.current_dir(f"self/task/{tid}"))
        except FileNotFoundError:
            continue
    return dirs


def test_the_quota_doubles_the_calibration_step_and_the_process_leaves_it(controller):
    """``slowing_load`` takes the quota where a controller is writable: the step in the limited
    process takes >= 2x as long; every thread is inside and a child is born inside; afterwards the
    process and its threads are back in their cgroup and the cgroup is gone."""
    home = controller.current_dir()
    stop = threading.Event()
    waiter = threading.Thread(target=stop.wait, daemon=True)  # a thread started before entering
    waiter.start()
    try:
        load = slowing_load(2.0)  # the quota, where a controller is writable (busy loops only without)
        quota, unloaded, loaded = load.load, load.unloaded_s, load.loaded_s
        try:
            assert load.kind == "cpu quota" and isinstance(quota, CpuQuota), load.describe()
            inside = quota.path
            assert loaded >= 2.0 * unloaded, (unloaded, loaded, quota.describe())
            assert inside.parent == controller.own_dir and inside.is_dir()
            assert controller.current_dir() == inside
            assert _threads_dirs(controller) == {inside}  # every thread moved, not only the main one
            # a process started inside is born in the cgroup, under the same quota
            child = subprocess.run(["cat", "/proc/self/cgroup"], capture_output=True, text=True, check=True)
            paths = {controllers: path for _hier, controllers, path in
                     (line.split(":", 2) for line in child.stdout.splitlines() if line)}
            assert controller.dir_of(paths[controller.key]) == inside
            limits = {name: (inside / name).read_text().strip()
                      for name, _value in controller.quota_files(quota.cpus, quota.period_us)}
            assert limits == dict(controller.quota_files(quota.cpus, quota.period_us)) and quota.cpus < 1
            # never so low that a slowed server looks stalled to the diagnosis (remote.readiness)
            assert quota.cpus >= MIN_QUOTA_CPUS >= 2 * MIN_CPU_PROGRESS_S
        finally:
            load.stop()
    finally:
        stop.set()
        waiter.join()
    assert controller.current_dir() == home
    assert _threads_dirs(controller) == {home}
    assert not inside.exists() and quota.path is None and quota.strays == []


def test_the_process_leaves_whatever_happens_inside_and_takes_its_children_out(controller):
    """An exception inside: the process is back in its cgroup, the cgroup removed, and a process
    started inside that is still running is moved out with it (recorded in ``strays``)."""
    home = controller.current_dir()
    quota = CpuQuota(controller, 0.5)
    sleeper = None
    with pytest.raises(ZeroDivisionError):
        with quota:
            inside = quota.path
            sleeper = subprocess.Popen(["sleep", "60"])  # outlives the block: a server the test left
            assert controller.current_dir(sleeper.pid) == inside
            1 / 0
    try:
        assert controller.current_dir() == home and not inside.exists()
        assert quota.strays == [sleeper.pid] and controller.current_dir(sleeper.pid) == home
    finally:
        sleeper.kill()
        sleeper.wait()



def test_the_step_without_the_load_is_timed_at_the_top_priority_and_the_priority_put_back():
    """``unloaded_calibration_step`` times the step at nice -20 where this process may raise its
    priority (root here and in CI), and leaves the thread at the priority it had, also when that
    was not 0; elsewhere at its own priority, saying why."""
    from testkit.cpuload import unloaded_calibration_step

    before = os.getpriority(os.PRIO_PROCESS, 0)
    if os.geteuid() != 0:  # may not raise it again after lowering it: measured as it is
        seconds, how = unloaded_calibration_step(iterations=200_000, repeats=1)
        assert seconds > 0 and how.startswith(f"at nice {before} (nice -20 refused: "), how
        return
    os.setpriority(os.PRIO_PROCESS, 0, 3)
    try:
        seconds, how = unloaded_calibration_step(iterations=200_000, repeats=1)
        assert os.getpriority(os.PRIO_PROCESS, 0) == 3
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)
    assert seconds > 0 and how == "at nice -20", how
