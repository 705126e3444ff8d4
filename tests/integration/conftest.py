import pytest


@pytest.fixture
def state_dir(tmp_path):
    """The box's workbench state (probe journal, diagnosis journal, server logs) for this test."""
    return tmp_path / "box-state"
