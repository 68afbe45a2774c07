"""The words and limits every notification shares (Slack Block Kit, SNS email, Amazon Q Developer).

Nothing here does I/O or sees a secret: the webhook URL is only known to the delivery code, and a
runbook base URL is stripped of any user-info before it is used. The renderers
(:mod:`hyperpod_debugger.notify.alerts`, :mod:`hyperpod_debugger.notify.chatbot`) keep to the published limits:

* Slack: at most 50 blocks; header ``plain_text`` ≤ 150 chars; section ``mrkdwn`` ≤ 3000 chars.
* SNS email: subject < 100 chars, no line breaks or control characters; message ≤ 256 KB (UTF-8).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from hyperpod_debugger.domain.model import Priority
from hyperpod_debugger.domain.sections import link

# Slack limits (Block Kit reference).
MAX_BLOCKS = 50
MAX_HEADER = 150
MAX_SECTION = 3000
# SNS limits (Publish): subject < 100 characters, message ≤ 256 KB.
MAX_SUBJECT = 99
MAX_EMAIL_BYTES = 200_000  # headroom under 262,144 bytes

EMOJI = {Priority.P0: "🔴", Priority.P1: "🟠", Priority.P2: "🟡"}
EMOJI_UNKNOWN = "⚪"
EMOJI_RESOLVED = "✅"
READ_ONLY_NOTE = "HyperPod Node Debugger is read-only: it never runs these commands."
MUTATING_HEADING = "Suggested command (run this yourself)"
READ_ONLY_HEADING = "Investigate (read-only)"


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn gives meaning to (``&``, ``<``, ``>``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def safe_base_url(base_url: str | None) -> str | None:
    """The runbook base URL without user-info, query or fragment, so no credential can leak through it."""
    if not base_url:
        return None
    parts = urlsplit(base_url.strip())
    if not parts.scheme or not parts.hostname:
        return None
    netloc = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) or None


def section_url(section: str, base_url: str | None) -> str | None:
    """The absolute runbook URL of a section, or None when no base URL is configured."""
    base = safe_base_url(base_url)
    return link(section, base) if base else None
