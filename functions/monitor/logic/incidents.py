"""After a run wrote its findings: bring the cluster's incidents up to date (what the alerts speak of).

Every run that writes findings (an event, a window, the sweep's cluster step, a probe batch) calls
:func:`reconcile` once, after ``store.apply``: the cluster's open findings are read again (so what another
run wrote a moment ago counts), turned into the incidents they hold
(:func:`~hyperpod_debugger.lifecycle.incidents.desired_incidents`), and compared with the stored ones. A node
incident is only touched by a run that looked at that node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from pydantic import ValidationError

from hyperpod_debugger.lifecycle.findings import StoredFinding, iso
from hyperpod_debugger.lifecycle.incidents import (
    REPAIR_GRACE,
    IncidentChange,
    IncidentPlan,
    StoredIncident,
    desired_incidents,
    nodes_looked_at,
    plan_incidents,
)
from hyperpod_debugger.notify.stored import to_finding

if TYPE_CHECKING:
    from hyperpod_debugger.domain.model import Finding, NodeVerdict, TriageReport


class IncidentsPort(Protocol):
    """What reconciling needs of the incident store (``hyperpod_debugger.store.incidents.IncidentStore``)."""

    def incidents(self, cluster_arn: str) -> dict[str, StoredIncident]: ...

    def is_new_cluster(self, cluster_arn: str) -> bool: ...

    def mark_baseline(self, cluster_arn: str, at: str) -> None: ...

    def apply(
        self, plan: IncidentPlan, replan: Callable[[str, StoredIncident | None], IncidentChange | None]
    ) -> list[IncidentChange]: ...


class OpenFindings(Protocol):
    def open_findings(self, cluster_arn: str, *, include_resolved: bool = False) -> dict[str, StoredFinding]: ...


@dataclass
class Reconciled:
    changes: list[IncidentChange] = field(default_factory=list)
    #: stored findings this layer could not read back (a section or shape from another version): skipped
    unreadable: list[str] = field(default_factory=list)
    baseline: bool = False

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.changes:
            out[str(c.kind)] = out.get(str(c.kind), 0) + 1
        return out


def _findings(open_now: Mapping[str, StoredFinding], unreadable: list[str]) -> list[tuple[str, Finding]]:
    out = []
    for fp, stored in sorted(open_now.items()):
        try:
            out.append((fp, to_finding(stored)))
        except (ValidationError, ValueError):
            unreadable.append(fp)
    return out


def reconcile(
    report: TriageReport,
    cluster_arn: str,
    *,
    findings: OpenFindings,
    incidents: IncidentsPort,
    now: datetime,
    scope: frozenset[str] | None,
    trigger: str | None = None,
    repair_grace: timedelta = REPAIR_GRACE,
) -> Reconciled:
    """Bring the cluster's incidents up to date after ``report``'s findings were written.

    ``scope``: the nodes this run looked at (None: every node, for a run that read the whole cluster).
    """
    result = Reconciled()
    open_now = findings.open_findings(cluster_arn)
    stored = incidents.incidents(cluster_arn)
    verdicts: dict[str, NodeVerdict] = {v.instance_id: v for v in report.node_verdicts}
    recovering = {v.instance_id: v.hyperpod for v in report.node_verdicts if v.hyperpod}
    for have in stored.values():
        # a repair this run knows nothing about is taken as still going (its grace still runs out)
        node = have.incident.instance_id
        if have.is_open and have.held and node and node not in verdicts and have.incident.hyperpod:
            recovering.setdefault(node, have.incident.hyperpod)
    desired = desired_incidents(
        cluster_arn,
        _findings(open_now, result.unreadable),
        cluster_name=report.cluster.name,
        recovering=recovering,
        verdicts=verdicts,
    )
    result.baseline = incidents.is_new_cluster(cluster_arn)
    options = {
        "cluster_arn": cluster_arn,
        "nodes_in_scope": scope,
        "baseline": result.baseline,
        "repair_grace": repair_grace,
        "trigger": trigger,
    }
    plan = plan_incidents(stored, desired, now, **options)  # type: ignore[arg-type]

    def replan(key: str, current: StoredIncident | None) -> IncidentChange | None:
        again = plan_incidents(
            {key: current} if current else {},
            {key: desired[key]} if key in desired else {},
            now,
            **options,  # type: ignore[arg-type]
        )
        return again.changes[0] if again.changes else None

    result.changes = incidents.apply(plan, replan)
    if result.baseline:
        incidents.mark_baseline(cluster_arn, iso(now))
    return result


def run_scope(
    report: TriageReport, changed: Iterable[str | None], *, node: str | None = None, nodes: Iterable[str] = ()
) -> frozenset[str]:
    """The nodes a node-scoped run or a probe batch looked at (what it may resolve an incident of)."""
    looked = nodes_looked_at(report.findings, changed, report.coverage.probed_nodes or (), node)
    return looked | frozenset(nodes)
