"""A local stand-in for a Slack incoming webhook, for tests and the demo.

``SlackSink`` listens on 127.0.0.1 at a free port and records each JSON payload it accepts. Like
Slack, it answers ``200 ok``, ``400 invalid_payload`` for a body that is not JSON, ``400 no_text``
when there is neither ``text`` nor ``blocks``, and ``400 invalid_blocks`` when Block Kit limits are
broken (more than 50 blocks, a header over 150 characters, a section text over 3000, more than 10
fields or a field over 2000). Fault switches: :meth:`fail_next` and :meth:`down`.

With a :class:`RateLimit` it also paces each webhook (each URL path) as Slack does: about one message a
second with short bursts, anything faster answered ``429 rate_limited`` with a ``Retry-After`` in whole
seconds. ``clock`` is what the limit reads (a simulation passes its own); ``log`` keeps, per answered
request, when it came and what it got.

    with SlackSink() as sink:
        post_to_webhook(sink.url, payload)
        assert sink.received == [payload]
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hyperpod_sim.background import serve_in_background, stop_serving

WEBHOOK_PATH = "/services/T00000000/B00000000/sinksecretXXXXXXXXXXXXXX"


def block_kit_problems(payload: Any) -> list[str]:
    """Why Slack would refuse ``payload`` (empty when it would accept it)."""
    if not isinstance(payload, dict):
        return ["payload is not a JSON object"]
    problems: list[str] = []
    blocks = payload.get("blocks")
    if not payload.get("text") and not blocks:
        return ["no_text"]
    if blocks is None:
        return problems
    if not isinstance(blocks, list):
        return ["blocks is not a list"]
    if len(blocks) > 50:
        problems.append(f"{len(blocks)} blocks (max 50)")
    for i, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        text = (block.get("text") or {}).get("text", "") if isinstance(block, dict) else ""
        if kind == "header":
            if (block.get("text") or {}).get("type") != "plain_text":
                problems.append(f"block {i}: header text must be plain_text")
            if len(text) > 150:
                problems.append(f"block {i}: header text {len(text)} chars (max 150)")
        elif kind == "section":
            fields = block.get("fields") or []
            if not text and not fields:
                problems.append(f"block {i}: section without text or fields")
            if len(text) > 3000:
                problems.append(f"block {i}: section text {len(text)} chars (max 3000)")
            if len(fields) > 10:
                problems.append(f"block {i}: {len(fields)} fields (max 10)")
            problems.extend(
                f"block {i}: field {j} {len(f.get('text', ''))} chars (max 2000)"
                for j, f in enumerate(fields)
                if len(f.get("text", "")) > 2000
            )
        elif kind == "context":
            elements = block.get("elements") or []
            if not 1 <= len(elements) <= 10:
                problems.append(f"block {i}: context with {len(elements)} elements (1 to 10)")
        elif kind != "divider":
            problems.append(f"block {i}: unexpected block type {kind!r}")
    return problems


@dataclass(frozen=True)
class RateLimit:
    """Slack's pace for one incoming webhook, as a token bucket: ``per_s`` messages a second on average,
    up to ``burst`` at once after a quiet spell."""

    per_s: float = 1.0
    burst: int = 3


class _Bucket:
    def __init__(self, limit: RateLimit, now: float) -> None:
        self.limit = limit
        self.tokens = float(limit.burst)
        self.at = now

    def take(self, now: float) -> float | None:
        """None when the request may pass (one token taken), else the seconds until it could."""
        self.tokens = min(float(self.limit.burst), self.tokens + max(now - self.at, 0.0) * self.limit.per_s)
        self.at = max(self.at, now)
        if self.tokens >= 1.0 - 1e-6:  # a microsecond's grace: clocks in epoch seconds are floats
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.limit.per_s


class SlackSink:
    """A Slack-webhook-like HTTP server on 127.0.0.1; use as a context manager."""

    def __init__(self, *, rate_limit: RateLimit | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.received: list[dict[str, Any]] = []
        self.requests = 0  # every POST, accepted or not
        self.rejected: list[list[str]] = []
        #: requests answered 429 (by :meth:`fail_next` or by the rate limit)
        self.throttled = 0
        #: (clock time, status) of every answered request, in order
        self.log: list[tuple[float, int]] = []
        self.rate_limit = rate_limit
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._faults: deque[tuple[int, float | None, bool]] = deque()
        #: every request answered with this status until :meth:`outage` is called with None
        self._outage: int | None = None
        #: seconds each request waits before any answer (a hanging endpoint)
        self._hang = 0.0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> SlackSink:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                with sink._lock:
                    hang = sink._hang
                if hang:
                    with sink._lock:
                        sink.requests += 1
                    time.sleep(hang)
                    return  # the client gave up long ago; close without an answer
                status, body, headers = sink._answer(raw, self.path)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the default stderr log
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{port}{WEBHOOK_PATH}"
        self._thread = serve_in_background(self._server, "slack-sink")
        return self

    def down(self) -> None:
        """Stop answering and close the port: the next delivery gets a connection error."""
        stop_serving(self._server, self._thread)
        self._server = None
        self._thread = None

    def __enter__(self) -> SlackSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ----------------------------------------------------------------- faults

    def outage(self, status: int | None = 503) -> None:
        """Answer every request with ``status`` from now on; ``None`` ends the outage."""
        with self._lock:
            self._outage = status

    def hang(self, seconds: float) -> None:
        """Hold every request ``seconds`` without answering (0: answer again)."""
        with self._lock:
            self._hang = max(seconds, 0.0)

    def fail_next(self, n: int, status: int = 500, *, retry_after: float | None = None, echo: bool = False) -> None:
        """Answer the next ``n`` requests with ``status`` (and a ``Retry-After`` header when given). ``echo``:
        the body quotes the request line, as a proxy's or gateway's error page often does."""
        with self._lock:
            self._faults.extend([(status, retry_after, echo)] * n)

    # ----------------------------------------------------------------- the answer

    def _answer(self, raw: bytes, path: str = WEBHOOK_PATH) -> tuple[int, str, dict[str, str]]:
        status, body, headers = self._judge(raw, path)
        with self._lock:
            self.log.append((self.clock(), status))
            if status == 429:
                self.throttled += 1
        return status, body, headers

    def _judge(self, raw: bytes, path: str) -> tuple[int, str, dict[str, str]]:
        with self._lock:
            self.requests += 1
            if self._outage is not None:
                return self._outage, "service_unavailable", {}
            if self._faults:
                status, retry_after, echo = self._faults.popleft()
                headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
                if echo:
                    return (
                        status,
                        f"<html><body>502 Bad Gateway: upstream failed for POST {path}</body></html>",
                        headers,
                    )
                return status, "rate_limited" if status == 429 else "fault injected", headers
            if self.rate_limit is not None:
                now = self.clock()
                bucket = self._buckets.setdefault(path, _Bucket(self.rate_limit, now))
                wait = bucket.take(now)
                if wait is not None:
                    return 429, "rate_limited", {"Retry-After": str(max(1, math.ceil(wait)))}
        try:
            payload = json.loads(raw)
        except ValueError:
            return 400, "invalid_payload", {}
        problems = block_kit_problems(payload)
        if problems:
            with self._lock:
                self.rejected.append(problems)
            return 400, "no_text" if problems == ["no_text"] else "invalid_blocks", {}
        with self._lock:
            self.received.append(payload)
        return 200, "ok", {}
