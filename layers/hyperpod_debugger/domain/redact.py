"""Credentials in text from the cluster, replaced before anything stores, sends or logs that text.

Lifecycle-script output, health-agent lines, kernel messages and HyperPod's own failure messages can hold a
secret someone printed: an access key pair exported by a script, a pre-signed S3 URL in a failure message, a
bearer token in a curl line, a private key a script catted. Every :class:`~hyperpod_debugger.domain.model.Finding`
passes its text through :func:`redact` when it is built, so the findings table, the incidents, Slack, email,
the CLI and agents only ever see ``[REDACTED <kind>]`` where the secret was. :class:`RedactingFilter` does the
same for log records (every logger a function configures, botocore's included), and
:func:`install_log_redaction` puts it in place once per process.

What is recognised (each marker names its kind):

* ``aws-access-key-id``: ``AKIA``/``ASIA`` followed by 16 upper-case letters or digits (IAM's key id forms);
* ``aws-secret-access-key``: a 40-character key after a name that says so (``aws_secret_access_key=``,
  ``"SecretAccessKey": "…"``), or a bare 40-character base64 word next to an access key id on the same line;
* ``aws-session-token``: the value after ``aws_session_token``, ``SessionToken`` or ``X-Amz-Security-Token``;
* ``presigned-url-signature``: the ``X-Amz-Signature``/``X-Amz-Credential`` query values (SigV4) and the
  ``Signature`` of a SigV2 URL;
* ``bearer-token`` / ``basic-auth``: the credential after ``Bearer`` or ``Authorization: Basic``;
* ``private-key``: a PEM private key block (over several lines when given lines, see :func:`redact_lines`);
* ``slack-webhook`` and ``slack-token``: a webhook's secret path, an ``xox…`` or ``xapp-…`` token;
* ``github-token``, ``jwt``;
* ``url-password``: the password of ``scheme://user:password@host``;
* ``password``: the value after ``password``/``passwd``/``secret``/``token``/``api_key`` and ``=`` or ``:``.

A redaction is deliberately generous around those names: a false positive hides a few characters of
evidence, a false negative publishes a credential to a channel.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable

MARK = "[REDACTED {}]"

_B64 = r"A-Za-z0-9/+"
# a quoted or bare value: the secret itself (group "v")
_VALUE = r"""["']?(?P<v>[^\s"'&,;]{8,})["']?"""

_RULES: list[tuple[str, re.Pattern[str]]] = [
    (
        "private-key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?P<v>.*?)(?:-----END [A-Z0-9 ]*-----|$)", re.S
        ),
    ),
    (
        "slack-webhook",
        re.compile(r"(?:https?://)?hooks\.slack(?:-gov)?\.com(?P<v>/(?:services|workflows|triggers)/[A-Za-z0-9/_+-]+)"),
    ),
    ("slack-webhook", re.compile(r"(?P<v>/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{16,})")),
    ("slack-token", re.compile(r"(?P<v>\bxox[abposrce]-[A-Za-z0-9-]{10,}|\bxapp-[A-Za-z0-9-]{10,})")),
    ("github-token", re.compile(r"(?P<v>\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}))")),
    ("jwt", re.compile(r"(?P<v>\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})")),
    (
        "aws-session-token",
        re.compile(
            r"(?i:aws_session_token|aws_security_token|sessiontoken|x-amz-security-token)"
            r"""["']?\s*(?:[:=]|%3D)\s*["']?(?P<v>[A-Za-z0-9/+=%_-]{16,})"""
        ),
    ),
    (
        "presigned-url-signature",
        re.compile(r"(?i:x-amz-signature|x-amz-credential)=(?P<v>[^&\s\"'<>]+)"),
    ),
    ("presigned-url-signature", re.compile(r"[?&]Signature=(?P<v>[^&\s\"'<>]+)")),
    (
        "aws-secret-access-key",
        re.compile(
            r"(?i:aws_secret_access_key|secret_access_key|secretaccesskey|aws_secret_key|secret_key)"
            rf"""["']?\s*[:=]\s*["']?(?P<v>[{_B64}]{{40}})(?![{_B64}])"""
        ),
    ),
    ("aws-access-key-id", re.compile(r"(?<![A-Z0-9])(?P<v>(?:AKIA|ASIA)[A-Z0-9]{16})(?![A-Z0-9])")),
    ("bearer-token", re.compile(r"(?i:\bbearer)\s+(?P<v>[A-Za-z0-9\-._~+/]{8,}=*)")),
    ("basic-auth", re.compile(r"(?i:authorization)[\"']?\s*:\s*[\"']?(?i:basic)\s+(?P<v>[A-Za-z0-9+/]{8,}=*)")),
    ("url-password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:(?P<v>[^/\s@]+)@")),
    (
        "password",
        re.compile(
            r"(?i:(?<![a-z0-9])(?:password|passwd|passphrase|pwd|client_secret|secret|api[_-]?key|access[_-]?token|auth[_-]?token|token))"
            r"""["']?\s*[:=]\s*""" + _VALUE
        ),
    ),
    ("password", re.compile(r"(?i:--?(?:password|passwd|token|secret)[ =])" + _VALUE)),
]

# A bare 40-character secret key is only recognised beside an access key id (a credentials line).
_BARE_SECRET = re.compile(rf"(?<![{_B64}=])(?P<v>[{_B64}]{{40}})(?![{_B64}=])")
_HAS_KEY_ID = re.compile(r"(?:AKIA|ASIA)[A-Z0-9]{16}|\[REDACTED aws-access-key-id\]")
_PEM_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*-----")
# cheap gate: a text without any of these (lower-cased) cannot hold a recognised secret
_GATE = (
    "key", "token", "secret", "pass", "pwd", "bearer", "basic", "signature", "credential", "hooks.slack",
    "/services/", "xox", "xapp-", "gh", "eyj", "akia", "asia", "@",
)  # fmt: skip


def _is_secret_shaped(word: str) -> bool:
    """A 40-character base64 word that is not a hex digest or a path: mixed case and a digit or ``/``/``+``."""
    return (
        any(c.islower() for c in word)
        and any(c.isupper() for c in word)
        and any(c.isdigit() or c in "/+" for c in word)
        and not word.startswith("/")
    )


#: Secrets this process knows exactly (a webhook URL and its path, registered by the code that uses them) ->
#: the label shown instead, which names the secret without revealing it (``webhook-<hash>``).
_KNOWN: dict[str, str] = {}
_KNOWN_LONGEST_FIRST: list[tuple[str, str]] = []


def register_secret(secret: str, label: str) -> None:
    """From now on, show ``label`` wherever ``secret`` appears (before the patterns run, so a known secret
    keeps its own label)."""
    if len(secret) > 1 and _KNOWN.get(secret) != label:
        _KNOWN[secret] = label
        _KNOWN_LONGEST_FIRST[:] = sorted(_KNOWN.items(), key=lambda kv: -len(kv[0]))


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by its label, then every recognised credential by
    ``[REDACTED <kind>]``."""
    if not text:
        return text
    for secret, label in _KNOWN_LONGEST_FIRST:
        if secret in text:
            text = text.replace(secret, label)
    low = text.lower()
    if not any(word in low for word in _GATE):
        return text
    for kind, pattern in _RULES:
        text = pattern.sub(functools.partial(_replace, kind=kind), text)
    if _HAS_KEY_ID.search(text):
        text = _BARE_SECRET.sub(
            lambda m: MARK.format("aws-secret-access-key") if _is_secret_shaped(m.group("v")) else m.group(0), text
        )
    return text


def _replace(match: re.Match[str], kind: str) -> str:
    whole, start, end = match.group(0), match.start("v") - match.start(), match.end("v") - match.start()
    if whole[start:end].startswith("[REDACTED"):
        return whole
    return whole[:start] + MARK.format(kind) + whole[end:]


def redact_lines(lines: Iterable[str]) -> list[str]:
    """Each line redacted; a PEM private key spread over lines is hidden from its BEGIN line to its END line."""
    out: list[str] = []
    in_key = False
    for line in lines:
        if not in_key and "-----" not in line:
            out.append(redact(line))
            continue
        if in_key:
            end = _PEM_END.search(line)
            if end is None:
                out.append(MARK.format("private-key"))
                continue
            in_key = False
            line = MARK.format("private-key") + line[end.end() :]
        begin = _PEM_BEGIN.search(line)
        if begin is not None and not _PEM_END.search(line, begin.end()):
            in_key = True
        out.append(redact(line))
    return out


# --------------------------------------------------------------------------- logging

_STANDARD = frozenset(vars(logging.LogRecord("n", 0, "p", 0, "m", None, None))) | {"message", "asctime"}


class RedactingFilter(logging.Filter):
    """Redact a record's message (formatted with its arguments) and any string it carries as an extra."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError, KeyError):  # arguments that do not format: the handler reports it
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        for key, value in list(vars(record).items()):
            if key not in _STANDARD and isinstance(value, str):
                scrubbed = redact(value)
                if scrubbed != value:
                    setattr(record, key, scrubbed)
        if record.exc_info and not record.exc_text and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            scrubbed = redact(text)
            if scrubbed != text:
                record.exc_text = scrubbed
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


_FILTER = RedactingFilter()


def install_log_redaction(*loggers: logging.Logger) -> None:
    """Redact every log record of the process: at creation (message and arguments, whichever logger made
    it, botocore's request and response bodies included), and again in every handler of the root logger and
    of ``loggers`` (extras such as Powertools' keys are set after creation). Idempotent."""
    for log in (logging.getLogger(), *loggers):
        for handler in log.handlers:
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(_FILTER)
    factory = logging.getLogRecordFactory()
    if not getattr(factory, "redacts", False):

        def redacting_factory(*args: object, **kwargs: object) -> logging.LogRecord:
            record = factory(*args, **kwargs)
            _FILTER.filter(record)
            return record

        redacting_factory.redacts = True  # type: ignore[attr-defined]
        logging.setLogRecordFactory(redacting_factory)
