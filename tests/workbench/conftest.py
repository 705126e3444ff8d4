import pytest


@pytest.fixture(scope="session")
def box():
    """The local box, through the real ``remote`` API."""
    from remote import connect

    return connect("local")
