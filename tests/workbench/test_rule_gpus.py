"""The ``gpus`` family (workbench/rules/gpus.py): what the box's GPUs leave a launch. The rules are
run before every launch by workbench.session.gpu_guard on real sandbox GPUs
(tests/workbench/test_gpus.py, tests/integration/test_gpus_box_sandbox_gpus.py); here, what each
finding says from the data it is given."""

from workbench.rules import REGISTRY
from workbench.rules.gpus import gpus_held, gpus_too_few


def test_gpus_too_few_names_the_missing_indices_and_nothing_when_they_fit():
    assert gpus_too_few([0, 1], 2) == []
    [f] = gpus_too_few([0, 1, 2, 3], 2, how="SGLang tp 4 x pp 1 x dp 1 from GPU 0 step 1", command="nvidia-smi")
    assert (f.rule, f.severity, f.prevents_start) == ("gpus-too-few", "error", True)
    assert f.message == ("the launch uses GPUs 0..3 (SGLang tp 4 x pp 1 x dp 1 from GPU 0 step 1) but the box has 2 "
                         "GPUs (nvidia-smi): no GPU2, GPU3")
    assert f.evidence["needed"]["value"] == [0, 1, 2, 3] and f.evidence["gpus"]["value"] == 2
    [f] = gpus_too_few([3, 2], 1)
    assert f.message.endswith("but the box has 1 GPU: no GPU2, GPU3")
    assert REGISTRY.get("gpus-too-few").prevents_start == "always"


def test_gpus_held_one_finding_per_holder_gpu_and_stopped_server():
    orphan = {"pid": 41, "title": "sglang::scheduler_TP0", "user": "alice", "mib": {0: 71772}, "listed": True,
              "orphan": True, "describe": "pid 41 sglang::scheduler_TP0 (user alice, ppid 1) GPU0 71772 MiB [orphan]"}
    theirs = {"pid": 52, "title": "python train.py", "user": "bob", "mib": {1: None}, "listed": True, "orphan": False}
    found = gpus_held([orphan, theirs], unattributed={3: 2048},
                      not_back=[{"index": 2, "used_mib": 70000, "baseline_mib": 4, "basis": "others"}])
    assert [f.rule for f in found] == ["gpus-held"] * 4 and all(f.prevents_start for f in found)
    assert found[0].message == orphan["describe"] and found[0].fix.startswith("reclaim_gpus=True")
    assert found[1].message == "pid 52 python train.py (user bob) holds GPU1 ? MiB" and found[1].fix is None
    assert found[1].evidence["user"]["value"] == "bob" and found[1].evidence["mib"]["value"] == {"1": None}
    assert found[2].message.startswith("GPU3: 2048 MiB held by no listed process")
    assert found[3].message == "GPU2: 70000 MiB used, baseline 4 MiB (others)"
    assert gpus_held() == []
