"""A notifying transition as an EventBridge event: what the courier puts on the bus, so a rule can route
findings anywhere (PagerDuty, Opsgenie, Jira through an API destination; another account's bus).

The envelope: ``source`` :data:`SOURCE`, ``detail-type`` :data:`DETAIL_TYPE`, ``resources`` the cluster's
ARN (and the node's, when the finding is about a node). ``detail`` is :class:`FindingEventDetail`,
versioned by ``schema_version``; its JSON Schema is ``references/finding-event.schema.json``, its prose
``references/finding-events.md``. Delivery is at least once (a retried put may repeat an event):
``detail.event_id`` is the same for the same transition every time, so a consumer can drop repeats.

Events are bounded: EventBridge takes at most 256 KB per PutEvents request (ten entries), so a detail is
at most :data:`DETAIL_BYTES` (evidence lines dropped from the end, then commands, then the message
clipped, until it fits; ``truncated`` says when) and :func:`chunks` packs ten entries per request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from hyperpod_debugger.domain.sections import link, pointer
from hyperpod_debugger.domain.validate import region_of_arn
from hyperpod_debugger.lifecycle.findings import NOTIFYING, StoredFinding, TransitionKind, parse_iso
from hyperpod_debugger.notify.stored import cluster_label

#: A custom source (EventBridge reserves ``aws.`` for AWS services).
SOURCE = "hyperpod-node-debugger"
DETAIL_TYPE = "HyperPod Node Debugger Finding"
SCHEMA_VERSION: Literal["1"] = "1"
EVIDENCE_LINES = 20
LINE_CHARS = 1000
MESSAGE_CHARS = 2000
MAX_COMMANDS = 10
#: PutEvents takes ten entries and 256 KB (262,144 bytes) per request: ten details of this size, their
#: source, detail-type and ARNs stay under it, and so does the outbox message (an SQS message, also
#: 256 KB) that carries them as escaped JSON strings.
MAX_ENTRIES = 10
DETAIL_BYTES = 20_000
T = TypeVar("T")
NEVER_RUN = "Suggested only: HyperPod Node Debugger never runs these. Read the blast radius before running one."


class EventCluster(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arn: str
    region: str | None = None
    account: str | None = None


class EventCommand(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(description="Shell command with ids filled in and values shell-quoted; never run by us.")
    purpose: str = ""
    mutates: bool = Field(description="True when running it changes cluster, node, network or workload state.")
    step: str | None = Field(default=None, description="investigate, change, drain, reboot or replace.")
    blast_radius: str | None = None
    iac_warning: str | None = None
    preconditions: list[str] = Field(default_factory=list)


class EventFinding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fingerprint: str = Field(description="Stable id of the finding (cluster, node, check, normalised message).")
    check: str
    tag: Literal["FAIL", "WARN", "UNKNOWN", "INFO", "PASS"]
    priority: Literal["P0", "P1", "P2"] | None = None
    state: Literal["OPEN", "ACKNOWLEDGED", "RESOLVED"]
    message: str
    evidence: list[str] = Field(default_factory=list, description="Verbatim lines the verdict rests on (clipped).")
    section: str | None = Field(default=None, description="Runbook section letter.")
    runbook: str | None = Field(default=None, description="references/node-diagnostics-detail.md § <section>.")
    runbook_url: str | None = Field(default=None, description="A link to the section (absolute when configured).")
    first_seen: str
    last_seen: str
    count: int = Field(ge=0, description="How many runs saw it.")
    acknowledged_by: str | None = None


class EventTrigger(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["event", "sweep", "log"] | None = None
    what: str | None = None
    node: str | None = None


class FindingEventDetail(BaseModel):
    """The ``detail`` of one finding event, schema version 1."""

    model_config = ConfigDict(extra="forbid", title="HyperPod Node Debugger finding event detail")

    schema_version: Literal["1"] = SCHEMA_VERSION
    event_id: str = Field(description="The same for the same transition every time it is put: drop repeats by it.")
    transition: Literal["NEW", "ESCALATED", "RESOLVED", "REOPENED"]
    at: str = Field(description="When the transition happened (ISO 8601, UTC).")
    cluster: EventCluster
    instance_id: str | None = Field(default=None, description="The node; null for a cluster-wide finding.")
    instance_group: str | None = Field(default=None, description="The node's instance group, where known.")
    instance_type: str | None = Field(default=None, description="The node's instance type, where known.")
    node_logical_id: str | None = Field(
        default=None,
        description="HyperPod's NodeLogicalId of the node, where the cluster has one (kept across replacements).",
    )
    finding: EventFinding
    open_seconds: float | None = Field(
        default=None,
        description="RESOLVED only: seconds from first seen to resolved (a reopened finding counts from its first "
        "opening).",
    )
    trigger: EventTrigger = Field(default_factory=EventTrigger)
    suggested_commands: list[EventCommand] = Field(default_factory=list)
    suggested_commands_note: str = NEVER_RUN
    truncated: bool = Field(default=False, description="Evidence, message or commands were clipped to fit.")


def _clip(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[: limit - 1] + "…", True)


def event_id(kind: TransitionKind, at: str, finding: StoredFinding) -> str:
    return hashlib.sha256("\x1f".join([finding.fingerprint, kind.value, at]).encode()).hexdigest()[:32]


def open_seconds(finding: StoredFinding, at: str) -> float | None:
    """Seconds from first seen to ``at``, or None when either time cannot be read."""
    try:
        return max(0.0, (parse_iso(at) - parse_iso(finding.first_seen)).total_seconds())
    except (TypeError, ValueError):
        return None


def detail_of(
    kind: TransitionKind, at: str, finding: StoredFinding, *, runbook_base_url: str | None = None
) -> FindingEventDetail:
    """The event detail for one notifying transition of a stored finding."""
    if kind not in NOTIFYING:
        raise ValueError(f"{kind.value} transitions are not put on the bus")
    truncated = False
    evidence = []
    for line in list(finding.evidence)[:EVIDENCE_LINES]:
        text, cut = _clip(line, LINE_CHARS)
        evidence.append(text)
        truncated |= cut
    truncated |= len(finding.evidence) > EVIDENCE_LINES
    message, cut = _clip(finding.message or finding.check, MESSAGE_CHARS)
    truncated |= cut
    commands = []
    for raw in list(finding.suggested_commands)[:MAX_COMMANDS]:
        command, cut = _clip(str(raw.get("command", "")), LINE_CHARS * 4)
        truncated |= cut
        commands.append(
            EventCommand(
                command=command,
                purpose=str(raw.get("purpose") or ""),
                mutates=bool(raw.get("mutates")),
                step=raw.get("step") if isinstance(raw.get("step"), str) else None,
                blast_radius=raw.get("blast_radius") if isinstance(raw.get("blast_radius"), str) else None,
                iac_warning=raw.get("iac_warning") if isinstance(raw.get("iac_warning"), str) else None,
                preconditions=[str(p) for p in raw.get("preconditions") or []][:10],
            )
        )
    truncated |= len(finding.suggested_commands) > MAX_COMMANDS
    arn = finding.cluster_arn
    account = arn.split(":")[4] if arn.startswith("arn:") and arn.count(":") >= 5 else None
    trigger_kind = finding.trigger_kind if finding.trigger_kind in ("event", "sweep", "log") else None
    detail = FindingEventDetail(
        event_id=event_id(kind, at, finding),
        transition=kind.value,
        at=at,
        cluster=EventCluster(
            name=cluster_label(arn, finding.cluster_name), arn=arn, region=region_of_arn(arn), account=account or None
        ),
        instance_id=finding.instance_id,
        instance_group=finding.instance_group if finding.instance_id else None,
        instance_type=finding.instance_type,
        node_logical_id=finding.node_logical_id,
        finding=EventFinding(
            fingerprint=finding.fingerprint,
            check=finding.check,
            tag=finding.tag.value,
            priority=finding.priority.value if finding.priority else None,
            state=finding.state.value,
            message=message,
            evidence=evidence,
            section=finding.section,
            runbook=pointer(finding.section) if finding.section else None,
            runbook_url=link(finding.section, runbook_base_url) if finding.section else None,
            first_seen=finding.first_seen,
            last_seen=finding.last_seen,
            count=finding.count,
            acknowledged_by=finding.acknowledged_by,
        ),
        open_seconds=open_seconds(finding, at) if kind is TransitionKind.RESOLVED else None,
        trigger=EventTrigger(kind=trigger_kind, what=finding.trigger, node=finding.trigger_node),
        suggested_commands=commands,
        truncated=truncated,
    )
    return fit(detail)


def detail_bytes(detail: FindingEventDetail) -> int:
    return len(detail.model_dump_json().encode())


def fit(detail: FindingEventDetail, limit: int = DETAIL_BYTES) -> FindingEventDetail:
    """The detail within ``limit`` bytes of JSON: evidence lines go from the end first (the first lines
    carry the verdict), then commands from the end (the ladder's first rung stays), then the message is cut."""
    if detail_bytes(detail) <= limit:
        return detail
    detail = detail.model_copy(deep=True)
    detail.truncated = True
    finding = detail.finding
    while finding.evidence and detail_bytes(detail) > limit:
        finding.evidence.pop()
    while len(detail.suggested_commands) > 1 and detail_bytes(detail) > limit:
        detail.suggested_commands.pop()
    for command in detail.suggested_commands:
        if detail_bytes(detail) <= limit:
            break
        command.blast_radius = _clip(command.blast_radius or "", 200)[0] or None
        command.preconditions = command.preconditions[:2]
        command.command = _clip(command.command, 500)[0]
    while detail_bytes(detail) > limit and len(finding.message) > 80:
        finding.message = _clip(finding.message, len(finding.message) // 2)[0]
    if detail_bytes(detail) > limit:
        detail.suggested_commands = []
        detail.trigger = EventTrigger(kind=detail.trigger.kind)
    return detail


def entry(detail: FindingEventDetail, bus: str) -> dict[str, Any]:
    """One PutEvents entry (``Time`` is left to EventBridge: the time it received the event)."""
    resources = [detail.cluster.arn] if detail.cluster.arn.startswith("arn:") else []
    return {
        "Source": SOURCE,
        "DetailType": DETAIL_TYPE,
        "Detail": detail.model_dump_json(),
        "Resources": resources,
        "EventBusName": bus,
    }


def chunks(items: Sequence[T]) -> list[list[T]]:
    """Items in PutEvents-sized groups of :data:`MAX_ENTRIES`, in order (each detail is at most
    :data:`DETAIL_BYTES`, so a group stays under the request's 256 KB)."""
    return [list(items[i : i + MAX_ENTRIES]) for i in range(0, len(items), MAX_ENTRIES)]


def schema() -> dict[str, Any]:
    """The JSON Schema of ``detail`` (``references/finding-event.schema.json``)."""
    document = FindingEventDetail.model_json_schema()
    document["description"] = (
        f"The detail of an EventBridge event with source {SOURCE!r} and detail-type {DETAIL_TYPE!r}: "
        "one notifying transition of one stored finding. Fields may be added within a schema_version; "
        "a field is never removed or changed in meaning without a new schema_version."
    )
    return document


def parse(entries: Sequence[dict[str, Any]]) -> list[FindingEventDetail]:
    """The details of PutEvents entries (tests and the demo read them back)."""
    return [FindingEventDetail.model_validate(json.loads(e["Detail"])) for e in entries]
