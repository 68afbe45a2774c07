"""Unit tier: pure code only. Any socket use is an error."""

from __future__ import annotations

import pytest
from pytest_socket import disable_socket, enable_socket


@pytest.fixture(autouse=True)
def _no_sockets() -> None:
    disable_socket()
    yield
    enable_socket()
