"""Odd input every entry point meets before it reads anything: lone surrogates (text no encoder takes), and
batch records that carry no id a partial batch response could name."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
#: What a lone surrogate becomes: a visible U+FFFD, so the text can be encoded, logged, stored and sent.
REPLACEMENT = "\ufffd"
_MAX_DEPTH = 64


def _clean_text(text: str) -> str:
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(REPLACEMENT, text)
    return text


def without_surrogates(value: Any, _depth: int = 0) -> Any:
    """``value`` with every lone surrogate (``"\\ud800"``: what a JSON ``\\ud800`` escape decodes to; no UTF-8
    encoder takes it) in its strings and keys replaced by U+FFFD; the same object when it holds none.

    Lambda's runtime hands a handler such strings as they came; SQS, DynamoDB, the logs and ``str.encode``
    refuse them, so every entry point cleans its input first. Past a nesting of 64 the rest is kept as text.
    """
    if isinstance(value, str):
        return _clean_text(value)
    if isinstance(value, dict | list | tuple) and _depth >= _MAX_DEPTH:
        return _clean_text(ascii(value)[:2048])
    if isinstance(value, dict):
        items = [(without_surrogates(k, _depth + 1), without_surrogates(v, _depth + 1)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        cleaned = [without_surrogates(v, _depth + 1) for v in value]
        if all(c is v for c, v in zip(cleaned, value, strict=True)):
            return value
        return type(value)(cleaned)
    return value


@dataclass(frozen=True)
class BatchRecords:
    """A batch event's records that can be named in a partial batch response, and those that cannot (with
    why): a record without its id can be neither retried alone nor reported as failed (an identifier Lambda
    does not find in the batch fails the whole batch), so it is set aside, never processed or reported."""

    records: list[dict[str, Any]] = field(default_factory=list)
    set_aside: list[tuple[Any, str]] = field(default_factory=list)


def sqs_message_id(record: Any) -> str:
    """An SQS record's ``messageId`` (what a partial batch response names), or ""."""
    value = record.get("messageId") if isinstance(record, dict) else None
    return value if isinstance(value, str) else ""


def stream_sequence_number(record: Any) -> str:
    """A DynamoDB stream record's ``dynamodb.SequenceNumber`` (what a partial batch response names), or ""."""
    images = record.get("dynamodb") if isinstance(record, dict) else None
    value = images.get("SequenceNumber") if isinstance(images, dict) else None
    return value if isinstance(value, str) else ""


def batch_records(event: Any, id_of: Any = sqs_message_id) -> BatchRecords:
    """The records of a batch event (``{"Records": [...]}``) split by whether ``id_of`` finds their id; a
    repeated id is set aside too (a response naming it would name two records)."""
    raw = event.get("Records") if isinstance(event, dict) else None
    out = BatchRecords()
    if not isinstance(raw, list):
        return out
    seen: set[str] = set()
    for record in raw:
        rid = id_of(record)
        if not isinstance(record, dict):
            out.set_aside.append((record, f"the record is a {type(record).__name__}, not an object"))
        elif not rid.strip():
            out.set_aside.append((record, "the record has no id to name it by"))
        elif rid in seen:
            out.set_aside.append((record, f"the record repeats the id {ascii(rid[:80])} of another record"))
        else:
            seen.add(rid)
            out.records.append(record)
    return out
