"""Parser for ``dcgmi health --check`` (``references/probe.md``): the "Health Monitor Report" table in the
tree layout of DCGM 2+ and the boxed layout of DCGM 1.x, or its ``-j`` JSON form; its overall verdict and the
incidents per entity.

Total like the nvidia-smi parsers (:mod:`.nvsmi`): odd, cut or garbled input gives a partial result, never an
exception.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from hyperpod_debugger.probe.parse.nvsmi import strip_marker

_DCGM_VERDICTS = ("Healthy", "Warning", "Failure", "Internal error")
_DCGM_OVERALL = re.compile(r"Overall Health\s*(?:\|\s*|:\s*)(Healthy|Warning|Failure|Internal error)", re.IGNORECASE)
_DCGM_OLD_ENTITY = re.compile(r"^(GPU|NvSwitch|Switch|CPU|ConnectX)\s+ID:\s*(\d+)$", re.IGNORECASE)
_DCGM_OLD_SYSTEM = re.compile(r"^(.+? system|Driver)\s*:\s*(Healthy|Warning|Failure)\s*-\s*(.*)$", re.IGNORECASE)
_DCGM_ERROR = re.compile(r"^Error\b|unable to (?:establish|connect|check)|not enabled|host engine", re.IGNORECASE)
_INCIDENT_VERDICTS = ("Warning", "Failure")


@dataclass(slots=True)
class DcgmIncident:
    entity: str  # "GPU 0", "NvSwitch 1", "system"
    health: str  # "Warning" / "Failure"
    system: str | None = None  # "Memory system", "PCIe system", …
    message: str = ""
    lines: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DcgmHealth:
    overall: str | None
    overall_line: str | None
    incidents: tuple[DcgmIncident, ...]
    #: why there is no verdict ("Error: Health watches not enabled…", connection errors)
    error_line: str | None = None
    truncated: bool = False


def _verdict(text: str) -> str | None:
    for verdict in _DCGM_VERDICTS:
        if text.lower().startswith(verdict.lower()):
            return verdict
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _dcgm_json(text: str, truncated: bool) -> DcgmHealth | None:
    """``dcgmi health --check -j``: ``{"body": {"Overall Health": {"value": "Healthy"}, ...}}``. Only the
    overall verdict is read; a report that is not Healthy keeps its incidents unparsed (none invented)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    body = data.get("body") if isinstance(data, dict) else None
    overall = body.get("Overall Health") if isinstance(body, dict) else None
    value = overall.get("value") if isinstance(overall, dict) else None
    if not isinstance(value, str):
        return None
    verdict = _verdict(value.strip())
    return DcgmHealth(
        overall=verdict, overall_line=f'"Overall Health": {value.strip()!r} (JSON)', incidents=(), truncated=truncated
    )


class _ReportReader:
    """Reads the table a line at a time, keeping where it is: the entity group (``GPU``), the entity a row
    belongs to and its health, and the incident a wrapped message row continues."""

    def __init__(self) -> None:
        self.overall: str | None = None
        self.overall_line: str | None = None
        self.error_line: str | None = None
        self.incidents: list[DcgmIncident] = []
        self.group = "GPU"
        self.entity: str | None = None
        self.entity_health: str | None = None
        self.current: DcgmIncident | None = None

    def read(self, stripped: str) -> None:
        """One non-blank line, stripped: the overall verdict, an error outside the table, or a table row."""
        found = _DCGM_OVERALL.search(stripped)
        if found:
            self.overall, self.overall_line = _verdict(found.group(1)) or found.group(1), stripped
            return
        if not (stripped.startswith("|") and stripped.endswith("|")):
            if self.error_line is None and _DCGM_ERROR.search(stripped):
                self.error_line = stripped
            return
        inner = stripped[1:-1]
        if " | " not in inner:
            return  # the report's title row
        left_raw, right = inner.split(" | ", 1)
        self._row(left_raw[1:] if left_raw.startswith(" ") else left_raw, right.strip(), stripped)

    def _row(self, left_raw: str, right: str, line: str) -> None:
        """A ``| left | right |`` row: its tree level (``->`` and indentation) says what the left cell names."""
        left = left_raw.strip()
        level = 0
        if left.startswith("->"):
            level = _indent(left_raw) // 3 + 1
            left = left[2:].strip()
        old = _DCGM_OLD_ENTITY.match(left)
        if old:  # DCGM 1.x: "GPU ID: 0 | Warning"
            self.entity, self.entity_health, self.current = f"{old.group(1)} {old.group(2)}", _verdict(right), None
        elif not left:
            self._overflow(right, line)
        elif level == 0:
            self.group, self.entity, self.current = left, None, None
        elif level == 1:
            self.entity, self.entity_health, self.current = f"{self.group} {left}", _verdict(right), None
        elif left.lower() != "errors":
            verdict = _verdict(right)
            self.current = None
            if self.entity and verdict in _INCIDENT_VERDICTS:
                self.current = self._add(DcgmIncident(entity=self.entity, health=verdict, system=left, lines=[line]))

    def _overflow(self, right: str, line: str) -> None:
        """A row with an empty left cell: the message of the system (or entity) above."""
        if not right:
            return
        old_system = _DCGM_OLD_SYSTEM.match(right)
        if old_system and self.entity:  # DCGM 1.x: "<system>: <health> - <message>" under the entity
            verdict = _verdict(old_system.group(2))
            self.current = None
            if verdict in _INCIDENT_VERDICTS:
                self.current = self._add(
                    DcgmIncident(
                        entity=self.entity,
                        health=verdict,
                        system=old_system.group(1),
                        message=old_system.group(3),
                        lines=[line],
                    )
                )
            return
        if self.current is None and self.entity and self.entity_health in _INCIDENT_VERDICTS:
            self.current = self._add(DcgmIncident(entity=self.entity, health=self.entity_health))
        if self.current is not None:
            self.current.message = f"{self.current.message} {right}".strip()
            self.current.lines.append(line)

    def _add(self, incident: DcgmIncident) -> DcgmIncident:
        self.incidents.append(incident)
        return incident


def parse_dcgm_health(text: str) -> DcgmHealth:
    text, truncated = strip_marker(text or "")
    if text.lstrip().startswith("{") and (from_json := _dcgm_json(text, truncated)) is not None:
        return from_json
    reader = _ReportReader()
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped and not set(stripped) <= set("+-=|"):
            reader.read(stripped)
    return DcgmHealth(
        overall=reader.overall,
        overall_line=reader.overall_line,
        incidents=tuple(reader.incidents),
        error_line=reader.error_line,
        truncated=truncated,
    )
