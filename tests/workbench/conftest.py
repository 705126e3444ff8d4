import pytest


@pytest.fixture(scope="session")
def box():
    """The local box through the real ``remote`` API when it is importable."""
    try:
        from remote import connect
    except ImportError:
        from workbench_test_helpers import StandInLocalBoxForTests

        return StandInLocalBoxForTests()
    return connect("local")
