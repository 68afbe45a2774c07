"""Unit tier: pure code only. Any network socket is an error (local socketpairs, which asyncio needs, are allowed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_socket import disable_socket, enable_socket


@pytest.fixture(autouse=True)
def _no_sockets() -> Iterator[None]:
    disable_socket(allow_unix_socket=True)  # asyncio event loops need a local socketpair
    yield
    enable_socket()
