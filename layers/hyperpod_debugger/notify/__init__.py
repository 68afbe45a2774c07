"""Notifications: pure renderers of finding transitions (Slack Block Kit, plain-text email) and delivery.

Renderers never see a webhook URL or any other secret; delivery (:mod:`hyperpod_debugger.notify.slack`)
never logs one.
"""

from __future__ import annotations

from hyperpod_debugger.notify.messages import (
    Notice,
    Transition,
    breaker,
    breaker_email,
    digest,
    digest_email,
    email_text,
    slack_message,
)

__all__ = [
    "Notice",
    "Transition",
    "breaker",
    "breaker_email",
    "digest",
    "digest_email",
    "email_text",
    "slack_message",
]
