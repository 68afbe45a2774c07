"""The real ``hyperpod-debugger mcp`` over streamable HTTP, started as a process for a test (shared by the e2e
test on loopback and the transport test beyond it)."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CLI = pathlib.Path(sys.executable).with_name("hyperpod-debugger")


@dataclass
class Served:
    process: subprocess.Popen[str]
    #: what the server wrote on stderr, once it has stopped
    stderr: str = ""


@contextmanager
def mcp_over_http(host: str, port: int, *flags: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """Start the CLI's HTTP server on ``host:port`` (with ``flags``), wait until it listens (60 s at most),
    and stop it afterwards; the environment is ours without HYPERPOD_DEBUGGER_* settings, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("HYPERPOD_DEBUGGER_")}
    process = subprocess.Popen(  # noqa: S603 - our own CLI
        [str(CLI), "mcp", "--transport", "streamable-http", "--host", host, "--port", str(port), *flags],
        env={**base, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    served = Served(process)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as attempt:
                if attempt.connect_ex((host, port)) == 0:
                    break
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the server did not listen within 60 s"
            time.sleep(0.2)
        yield served
    finally:
        process.terminate()
        _, served.stderr = process.communicate(timeout=30)
