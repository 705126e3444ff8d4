"""workbench.engine.releases: the published SGLang wheels, downloaded once and unpacked, never installed."""

import pytest

from workbench.engine.releases import COVERED_RELEASES, ReleaseUnavailable, release_source


@pytest.mark.parametrize("bad", ["", "latest", "0.5.9; rm -rf /", "../0.5.9", "v0.5.9"])
def test_release_source_refuses_what_is_not_a_release_number(bad, tmp_path):
    with pytest.raises(ValueError, match="not an SGLang release number"):
        release_source(bad, cache=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_covered_releases_unpack_with_their_own_version(sglang_release):
    for version in COVERED_RELEASES:
        pkg = sglang_release(version)
        assert (pkg / "srt/models/llama_eagle3.py").is_file(), version
        texts = [(pkg / n).read_text() for n in ("version.py", "_version.py") if (pkg / n).exists()]
        assert any(f"'{version}'" in t or f'"{version}"' in t for t in texts), (version, texts)


def test_second_call_is_served_from_the_cache(sglang_release, tmp_path):
    pkg = sglang_release("0.5.9")
    assert (pkg.parent / ".unpacked").read_text().startswith("sglang-0.5.9-")
    assert release_source("0.5.9") == pkg


def test_a_release_that_does_not_exist_is_refused_with_pips_words(tmp_path):
    with pytest.raises(ReleaseUnavailable, match=r"sglang==0\.0\.999: pip download failed"):
        release_source("0.0.999", cache=tmp_path, timeout=120)
