"""Deliver a rendered message to a Slack incoming webhook.

The webhook URL is a secret (it lives in Secrets Manager): it never appears in a log record or in
an exception. Logs name the webhook by :func:`webhook_id`, a short hash. Exceptions are raised
without a chained cause, so a logged traceback cannot carry the URL either.

One attempt by default: the monitor's courier paces each webhook and retries through its queue, so a
retry here would only post out of turn. ``attempts`` above one retries 5xx and connection errors with
exponential backoff, for a caller without a queue. A 429 is never retried here: Slack's
``Retry-After`` concerns every sender on the webhook, so it is raised at once, in
:attr:`DeliveryError.retry_after`, for the caller to hold the whole webhook back. Any other non-2xx
status fails at once. The caller decides what a :class:`DeliveryError` means (the courier: the message
waits in the outbox, or goes to its dead-letter queue when Slack refused it as such).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import urllib3

from hyperpod_debugger.domain.redact import install_log_redaction, redact, register_secret

logger = logging.getLogger(__name__)
# The webhook URL must never reach a log record, whoever configures logging: redaction is installed with this
# module (idempotent; the functions and the CLI install it too).
install_log_redaction()

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class DeliveryError(Exception):
    """The message was not delivered. ``status`` is the last HTTP status, or None when no answer came."""

    def __init__(self, status: int | None, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"Slack delivery failed ({status if status is not None else 'no response'}): {message}")
        self.status = status
        self.message = message
        #: seconds Slack asked us to wait (a 429's Retry-After), when it said
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status == 429 or self.status >= 500


def webhook_id(url: str) -> str:
    """A short, stable, non-reversible name for a webhook URL, safe to log."""
    return "webhook-" + hashlib.sha256(url.encode("utf-8")).hexdigest()[:12]


def _check_url(url: str) -> None:
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        host, parts = None, None
    if parts is None or not host:
        raise DeliveryError(None, "the webhook URL is malformed")
    if parts.scheme == "https" or (parts.scheme == "http" and host in _LOOPBACK):
        return
    raise DeliveryError(None, "the webhook URL must use https")


def _retry_after(response: urllib3.BaseHTTPResponse) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None  # an HTTP-date: fall back to our own backoff


def _body_excerpt(response: urllib3.BaseHTTPResponse, url: str) -> str:
    """The start of an error body, safe to log and to keep as a dead-letter reason: Slack or a proxy in
    between may echo the webhook URL, its path, or the path's last part (the secret token)."""
    text = (response.data or b"").decode("utf-8", "replace").strip()
    path = urlsplit(url).path
    secrets = [url, path, *(part for part in path.split("/") if len(part) >= 12)]
    for secret in sorted((s for s in secrets if len(s) > 1), key=len, reverse=True):
        text = text.replace(secret, "<webhook>")
    return redact(" ".join(text.split()))[:200] or "(empty body)"


def post_to_webhook(
    url: str,
    payload: dict[str, Any],
    *,
    timeout: float = 10,
    attempts: int = 1,
    backoff: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """POST ``payload`` as JSON to the webhook; return on 2xx, raise :class:`DeliveryError` otherwise (a 429
    at once, with Slack's ``Retry-After``)."""
    _check_url(url)
    hook = webhook_id(url)
    path = urlsplit(url).path
    # every log record and error text of this process shows the webhook by its id (urllib3 logs the
    # request line, path included, at DEBUG; in a webhook URL the path is the secret)
    register_secret(url, hook)
    register_secret(path, f"/<{hook}>")
    body = json.dumps(payload).encode("utf-8")
    http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=timeout))
    status: int | None = None
    reason = ""
    attempts = max(attempts, 1)
    try:
        for attempt in range(1, attempts + 1):
            wait = backoff * 2 ** (attempt - 1)
            try:
                response = http.request(
                    "POST",
                    url,
                    body=body,
                    headers={"Content-Type": "application/json; charset=utf-8"},
                    redirect=False,
                )
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                # str(exc) may name the URL (host and path): keep only the class name.
                status, reason = None, f"connection error ({type(exc).__name__})"
            else:
                status = response.status
                if 200 <= status < 300:
                    logger.info("slack delivery to %s succeeded (status %s, attempt %d)", hook, status, attempt)
                    return
                reason = _body_excerpt(response, url)
                if status == 429:
                    retry_after = _retry_after(response)
                    logger.warning(
                        "slack delivery to %s rate limited (attempt %d, Retry-After %s)", hook, attempt, retry_after
                    )
                    raise DeliveryError(status, reason, retry_after=retry_after)
                if status < 500:
                    logger.error("slack delivery to %s rejected: status %s: %s", hook, status, reason)
                    raise DeliveryError(status, reason)
            if attempt < attempts:
                logger.warning(
                    "slack delivery to %s failed (status %s: %s), attempt %d/%d; retrying in %.1fs",
                    hook,
                    status,
                    reason,
                    attempt,
                    attempts,
                    wait,
                )
                sleep(wait)
    finally:
        http.clear()
    logger.error("slack delivery to %s failed after %d attempts (status %s: %s)", hook, attempts, status, reason)
    raise DeliveryError(status, f"{reason} after {attempts} attempts")
