"""The schema check gives up on a server that never answers, instead of waiting for TCP."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from service.errors import StoreUnavailable
from service.store import migrate


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port whose kernel completes the TCP handshake but where nothing ever answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_the_schema_check_gives_up_on_a_server_that_never_answers(
    silent_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(migrate, "CONNECT_TIMEOUT_SECONDS", 1)
    began = time.monotonic()
    with pytest.raises(StoreUnavailable) as raised:
        migrate.is_at_head(f"postgresql://postgres@127.0.0.1:{silent_server}/test")
    assert time.monotonic() - began < 10, "waited for the kernel instead of the connect timeout"
    assert "timeout" in str(raised.value).lower()
