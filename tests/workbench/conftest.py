import pytest


@pytest.fixture(scope="session")
def box():
    """The local box, through the real ``remote`` API."""
    from remote import connect

    return connect("local")


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """The box's workbench state (diagnosis journal, probe journal) for this test only, also for
    the ``workbench`` commands the test runs (``$EAGLE_WORKBENCH_STATE_DIR``)."""
    path = tmp_path / "box-state"
    monkeypatch.setenv("EAGLE_WORKBENCH_STATE_DIR", str(path))
    return path
