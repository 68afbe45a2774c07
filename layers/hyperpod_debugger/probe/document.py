"""The probe document: what ``probe.sh`` prints, or a folder of raw outputs, typed.

Contract (``references/probe.md``)::

    {"schema_version": 1, "hostname": str, "collected_at": ISO-8601, "uptime_s": float,
     "items": {ITEM_ID: {"command": str, "exit_code": int, "stdout": str, "stderr": str,
                         "truncated": bool}}}
"""

from __future__ import annotations

import functools
import json
import pathlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

T = TypeVar("T")

SCHEMA_VERSION = 1

#: exit codes that mean "the tool is not there", not "the tool said something is wrong"
MISSING_TOOL_CODES = frozenset({126, 127})
#: the probe's marker when it stops an output at its size limit
TRUNCATION_MARKER = "[hyperpod-debugger: output truncated]"


#: what :meth:`ProbeDocument.cached` answers for a key nothing was parsed under yet
NOT_PARSED = object()


class ProbeDocumentError(ValueError):
    """The document is not a probe document (clear message, nothing half-loaded)."""


@dataclass(frozen=True, slots=True)
class ProbeItem:
    command: str
    exit_code: int | None
    stdout: str
    stderr: str = ""
    truncated: bool = False

    @property
    def missing_tool(self) -> bool:
        if self.exit_code in MISSING_TOOL_CODES:
            return True
        if self.exit_code in (0, None):
            return False
        text = f"{self.stderr}\n{self.stdout[:200]}".lower()
        return "command not found" in text or "not found" in text[:200]

    @property
    def timed_out(self) -> bool:
        return self.exit_code == 124


@dataclass(frozen=True, slots=True)
class ProbeDocument:
    hostname: str
    collected_at: datetime | None
    uptime_s: float | None
    items: dict[str, ProbeItem] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    #: files of a raw folder that are not probe items (``analyze --raw-dir`` names them)
    ignored: tuple[str, ...] = ()
    #: parse results shared by the evaluators of one document (each item is parsed once)
    _parsed: dict[Hashable, object] = field(default_factory=dict, repr=False, compare=False)

    def parsed(self, key: Hashable, parse: Callable[[], T]) -> T:
        """``parse()`` once per document and ``key``; later calls return the same result."""
        cache = self._parsed
        if key in cache:
            return cache[key]  # type: ignore[return-value]
        result = cache[key] = parse()
        return result

    def forget_parsed(self) -> None:
        """Drop the shared parse results (the next evaluation parses again)."""
        self._parsed.clear()

    def cached(self, key: Hashable) -> object:
        """What :meth:`parsed` keeps under ``key``, or :data:`NOT_PARSED` (a hot path's cheap look first)."""
        return self._parsed.get(key, NOT_PARSED)

    def item(self, item_id: str) -> ProbeItem | None:
        return self.items.get(item_id)

    @property
    def boot_time(self) -> datetime | None:
        if self.collected_at is None or self.uptime_s is None:
            return None
        return self.collected_at - timedelta(seconds=self.uptime_s)


#: outputs longer than this are parsed for their document only (a fleet's identical ones are short)
SHARED_MAX_CHARS = 8192


def fleet_shared(parse: Callable[[str], T]) -> Callable[[str], T]:
    """For the parser of an item a fleet's nodes print alike (unit states, mounts, block and EFA devices,
    libfabric providers): each distinct output up to :data:`SHARED_MAX_CHARS` is parsed once per
    process (the last 128 kept) and its result shared, so the parser must return an immutable value."""
    remembered = functools.lru_cache(maxsize=128)(parse)

    @functools.wraps(parse)
    def shared(text: str) -> T:
        return remembered(text) if len(text) <= SHARED_MAX_CHARS else parse(text)

    return shared


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def from_dict(data: object) -> ProbeDocument:
    if not isinstance(data, dict):
        raise ProbeDocumentError("a probe document is a JSON object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ProbeDocumentError(f"unsupported probe schema_version {version!r} (expected {SCHEMA_VERSION})")
    raw_items = data.get("items")
    if not isinstance(raw_items, dict):
        raise ProbeDocumentError("the probe document has no 'items' object")
    items: dict[str, ProbeItem] = {}
    for item_id, raw in raw_items.items():
        if not isinstance(raw, dict):
            raise ProbeDocumentError(f"item {item_id!r} is not an object")
        code = raw.get("exit_code")
        items[str(item_id)] = ProbeItem(
            command=str(raw.get("command", "")),
            exit_code=code if isinstance(code, int) else None,
            stdout=str(raw.get("stdout") or ""),
            stderr=str(raw.get("stderr") or ""),
            truncated=bool(raw.get("truncated", False)),
        )
    uptime = data.get("uptime_s")
    return ProbeDocument(
        hostname=str(data.get("hostname") or "unknown"),
        collected_at=_parse_time(data.get("collected_at")),
        uptime_s=float(uptime) if isinstance(uptime, int | float) else None,
        items=items,
    )


def loads(text: str) -> ProbeDocument:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = " (the output looks cut short)" if text.rstrip() and not text.rstrip().endswith("}") else ""
        raise ProbeDocumentError(f"not valid JSON at line {exc.lineno} column {exc.colno}{hint}") from exc
    return from_dict(data)


def from_raw_dir(path: pathlib.Path, collected_at: datetime | None = None) -> ProbeDocument:
    """A folder of raw outputs named ``<item_id>.txt`` (stdout only). Files that are not named for a
    probe item are kept aside by name (``ignored``), never guessed at; a folder with none of them gives
    a document without items, which the evaluators report as not judged."""
    if not path.is_dir():
        raise ProbeDocumentError(f"{path} is not a folder")
    outputs: dict[str, str] = {}
    ignored: list[str] = []
    for p in sorted(path.iterdir()):
        if not p.is_file():
            continue
        if p.suffix == ".txt":
            outputs[p.stem] = p.read_text(errors="replace")
        else:
            ignored.append(p.name)
    doc = from_outputs(outputs, hostname=path.name, collected_at=collected_at, command="(raw file)")
    named = [f"{item_id}.txt" for item_id in doc.ignored]
    return ProbeDocument(
        hostname=doc.hostname,
        collected_at=doc.collected_at,
        uptime_s=doc.uptime_s,
        items=doc.items,
        ignored=tuple(sorted([*ignored, *named])),
    )


def from_outputs(
    outputs: dict[str, str],
    *,
    hostname: str = "unknown",
    collected_at: datetime | None = None,
    command: str = "(raw output)",
) -> ProbeDocument:
    """Raw outputs by probe item id (what a person or an agent pasted): the items named for a probe item,
    the others kept aside by name (``ignored``), never guessed at."""
    from hyperpod_debugger.probe.delivery import item_ids

    known = set(item_ids())
    items: dict[str, ProbeItem] = {}
    ignored: list[str] = []
    for item_id, text in outputs.items():
        if item_id in known and isinstance(text, str):
            items[item_id] = ProbeItem(command=command, exit_code=0, stdout=text)
        else:
            ignored.append(str(item_id))
    uptime = None
    if "uptime" in items:
        first = items["uptime"].stdout.split()
        uptime = float(first[0]) if first and first[0].replace(".", "", 1).isdigit() else None
    return ProbeDocument(
        hostname=hostname, collected_at=collected_at, uptime_s=uptime, items=items, ignored=tuple(ignored)
    )
