"""Cluster events (ListClusterEvents + DescribeClusterEvent), windowed and structured.

Only clusters with NodeProvisioningMode=Continuous have events at all; the collector marks
the observation skipped otherwise and the runner reports that, instead of "no events".
``EventLevel`` decides what matters (Info events are counted, never alerted); the real
failure text comes from ``EventMetadata`` where the service puts it. Every Warn/Error event in
the window is counted and grouped; none is dropped by an arbitrary cut.
"""

from __future__ import annotations

import re
from collections import defaultdict
from textwrap import shorten
from typing import TYPE_CHECKING

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.checks.classify import classify
from hyperpod_debugger.domain.checking import Check
from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, Priority, Tag, trim_evidence

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import ClusterEvent, ClusterObservation

_IDS = re.compile(r"\bi-[0-9a-f]{8,17}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def _signature(event: ClusterEvent) -> str:
    text = event.failure_messages[0] if event.failure_messages else event.description
    return _IDS.sub("<id>", text)


def _line(event: ClusterEvent) -> str:
    where = "/".join(p for p in (event.instance_group, event.instance_id) if p) or event.resource_type
    line = f"{event.time.isoformat()} [{event.level}] {where}: {event.description}"
    if event.failure_messages:
        line += " | " + " | ".join(event.failure_messages)
    return line


def check_events(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    window = obs.events.get()
    c = obs.cluster
    hours = round((window.end - window.start).total_seconds() / 3600, 1)
    scope = f" for node {ctx.scope_node}" if ctx.scope_node else ""
    serious = [e for e in window.events if e.level in ("Warn", "Error")]
    informational = len(window.events) - len(serious)
    groups: dict[tuple[str, str, str | None, str], list[ClusterEvent]] = defaultdict(list)
    for event in serious:
        cause = classify(event.description, *event.failure_messages)
        groups[(str(event.level), cause.key, event.instance_group, _signature(event))].append(event)

    out: list[Finding] = []
    for (level, _, group_name, _), events in groups.items():
        first = events[0]
        cause = classify(first.description, *first.failure_messages)
        instances = sorted({e.instance_id for e in events if e.instance_id})
        count = len(events)
        subject = f"in group {group_name}" if group_name else "on the cluster"
        nodes = f", {len(instances)} node(s)" if instances else ""
        evidence = trim_evidence([_line(e) for e in sorted(events, key=lambda e: e.time)])
        if window.undescribed:
            evidence.append(
                f"({window.undescribed} Warn/Error event(s) in this window were not described individually)"
            )
        summary = shorten(_signature(first), 160, placeholder=" …")
        describe_first = read_only(
            [
                "aws",
                "sagemaker",
                "describe-cluster-event",
                "--region",
                c.region,
                "--cluster-name",
                c.name,
                "--event-id",
                first.event_id,
            ],
            "Read the full event, including its failure metadata",
        )
        out.append(
            finding(
                obs,
                "cluster.events",
                Tag.FAIL if level == "Error" else Tag.WARN,
                f"{count} {level} event(s) {subject}{nodes}: {cause.label} — {summary}",
                priority=cause.priority if level == "Error" else Priority.P2,
                section=cause.section,
                instance_id=instances[0] if len(instances) == 1 else None,
                instance_group=group_name,
                evidence=evidence,
                root_cause=cause.root_cause,
                suggested_commands=[describe_first],
            )
        )
    if not out:
        out.append(
            finding(
                obs,
                "cluster.events",
                Tag.PASS,
                f"No Warn or Error cluster events in the last {hours:g} h{scope} "
                f"({informational} informational event(s))",
                section="F",
            )
        )
    elif informational:
        out.append(
            finding(
                obs,
                "cluster.events",
                Tag.INFO,
                f"{informational} informational cluster event(s) in the last {hours:g} h{scope} not shown",
            )
        )
    return out


CHECKS: tuple[Check, ...] = (Check("cluster.events", "F", "Cluster events", check_events),)
