"""Run a ``socketserver`` server on a daemon thread and stop it again: shared by the simulator's fakes."""

from __future__ import annotations

import socketserver
import threading

#: How often ``serve_forever`` looks for a shutdown request (short: tests start and stop servers often).
POLL_INTERVAL = 0.05


def serve_in_background(server: socketserver.BaseServer, name: str) -> threading.Thread:
    """Start serving on a daemon thread named ``name``; returns the thread for :func:`stop_serving`."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL}, name=name, daemon=True
    )
    thread.start()
    return thread


def stop_serving(server: socketserver.BaseServer | None, thread: threading.Thread | None, timeout: float = 5) -> None:
    """Stop accepting, close the listening socket and join the serving thread (either may be None)."""
    if server is not None:
        server.shutdown()
        server.server_close()
    if thread is not None:
        thread.join(timeout=timeout)
