import pytest


@pytest.fixture(scope="session")
def box():
    """The local box, through the real ``remote`` API."""
    from remote import connect

    return connect("local")


@pytest.fixture(scope="session")
def sglang_source(tmp_path_factory):
    """The unpacked SGLang 0.5.23 package directory (``.../sglang``): ``$SGLANG_SRC``, else
    ``/tmp/sglang_src/sglang``, else the published wheel fetched with ``pip download --no-deps
    sglang==0.5.23`` and its ``sglang/`` tree unzipped. Skips, saying why, when none can be had."""
    import os
    import pathlib
    import subprocess
    import sys
    import zipfile

    for cand in (os.environ.get("SGLANG_SRC"), "/tmp/sglang_src/sglang"):
        if cand and (pathlib.Path(cand) / "srt/models/llama_eagle3.py").exists():
            return pathlib.Path(cand)
    dest = tmp_path_factory.mktemp("sglang_src")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "sglang==0.5.23",
                           "-d", str(dest)], capture_output=True, text=True, timeout=300)
    wheels = list(dest.glob("sglang-0.5.23-*.whl"))
    if proc.returncode != 0 or not wheels:
        pytest.skip(f"SGLang 0.5.23 source unavailable (pip download failed: {proc.stderr.strip()[-200:]})")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(dest, [n for n in zf.namelist() if n.startswith("sglang/")])
    return dest / "sglang"
