"""One batch of the sweep's probe plan: its nodes probed, their findings written, the rotation's clock. Kept apart
from the cluster step (:mod:`functions.monitor.logic.sweep`) so the probe function loads only what a batch runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from functions.monitor.logic.incidents import IncidentsPort, reconcile, run_scope
from functions.monitor.logic.signals import kinds
from hyperpod_debugger.lifecycle.findings import SWEEP, StoredFinding, SweepPlan, Transition, parse_iso, plan_sweep
from hyperpod_debugger.lifecycle.incidents import REPAIR_GRACE
from hyperpod_debugger.lifecycle.rotation import node_of
from hyperpod_debugger.probe_batch import ProbeBatchRequest

if TYPE_CHECKING:
    from hyperpod_debugger.domain.model import TriageReport
    from hyperpod_debugger.probe.options import ProbeOptions


class SweepStore(Protocol):
    """What the sweep needs of the findings store (``hyperpod_debugger.store.findings.FindingStore``)."""

    def open_findings(self, cluster_arn: str, *, include_resolved: bool = False) -> dict[str, StoredFinding]: ...

    def apply(self, plan: SweepPlan, now: datetime) -> list[Transition]: ...

    def probe_records(self, cluster_arn: str) -> dict[str, tuple[datetime, dict[str, str]]]: ...

    def record_probed(
        self,
        cluster_arn: str,
        instance_ids: list[str],
        now: datetime,
        software: Mapping[str, Mapping[str, str]] | None = None,
    ) -> object: ...

    def put_plan(self, cluster_arn: str, sweep_id: str, batches: list[dict[str, Any]], now: datetime) -> int: ...

    def plan_batch(self, cluster_arn: str, sweep_id: str, batch: int) -> dict[str, Any] | None: ...


@dataclass
class BatchResult:
    status: str  # processed | error
    cluster_arn: str
    planned: int = 0
    probed: list[str] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    error: str | None = None

    def response(self) -> dict[str, Any]:
        if self.status != "processed":
            return {"status": self.status, "cluster_arn": self.cluster_arn, "error": self.error}
        return {
            "status": "processed",
            "cluster_arn": self.cluster_arn,
            "planned": self.planned,
            "probed": len(self.probed),
            "transitions": kinds(self.transitions),
        }


@dataclass(frozen=True)
class PlannedBatch:
    """One batch of a stored probe plan as :func:`schedule` wrote it: its nodes, and the share of the rate, the
    slots and the end of the round it runs with (None: the function's own)."""

    nodes: list[dict[str, Any]]
    rate: float | None = None
    slots: int | None = None
    stop_at: datetime | None = None

    @classmethod
    def stored(cls, store: SweepStore, cluster_arn: str, sweep_id: str, batch: int) -> PlannedBatch:
        """Raises ``ValueError`` when the store holds no such batch, ``KeyError`` / ``ValueError`` /
        ``TypeError`` for one that is not a plan batch."""
        found = store.plan_batch(cluster_arn, sweep_id, batch)
        if found is None:
            raise ValueError(f"no stored plan batch {batch} of sweep {sweep_id!r} (expired, or never written)")
        return cls(
            nodes=found["nodes"],
            rate=float(found["rate"]) if found.get("rate") else None,
            slots=int(found["slots"]) if found.get("slots") else None,
            stop_at=parse_iso(found["stop_at"]) if found.get("stop_at") else None,
        )

    def options(self, base: ProbeOptions) -> ProbeOptions:
        """``base`` as the cluster step scheduled this batch: its share of the rate, its slots, its round."""
        return replace(
            base, rate=self.rate or base.rate, concurrency=self.slots or base.concurrency, start_until=self.stop_at
        )


def batch_request(
    cluster_arn: str, descriptors: list[dict[str, Any]], *, region: str, now: datetime, options: ProbeOptions
) -> ProbeBatchRequest:
    """The probe request for one Map item (``describe_node`` descriptors). Raises ``ValueError`` for a
    descriptor that names no usable node."""
    return ProbeBatchRequest(
        cluster=cluster_arn,
        region=region,
        nodes=tuple(node_of(d) for d in descriptors),
        controllers=frozenset(d["instance_id"] for d in descriptors if d.get("role") == "controller"),
        recovering={d["instance_id"]: str(d["recovering"]) for d in descriptors if d.get("recovering")},
        now=now,
        probe_options=options,
    )


def probe_batch(
    request: ProbeBatchRequest,
    *,
    probe: Callable[[ProbeBatchRequest], TriageReport],
    store: SweepStore,
    incidents: IncidentsPort | None = None,
    repair_grace: timedelta = REPAIR_GRACE,
) -> BatchResult:
    """Probe exactly the batch's nodes, write what changed for them (and their incidents), and remember when
    each was probed (the rotation's clock)."""
    assert request.now is not None
    report = probe(request)
    if report.error is not None:
        return BatchResult("error", request.cluster, error=report.error.message)
    plan = plan_sweep(store.open_findings(request.cluster), report, request.now, trigger=SWEEP)
    transitions = store.apply(plan, request.now)
    if incidents is not None:
        changed = [c.item.instance_id for c in plan.changes()]
        scope = run_scope(report, changed, nodes=(n.instance_id for n in request.nodes))
        reconcile(
            report,
            request.cluster,
            findings=store,
            incidents=incidents,
            now=request.now,
            scope=scope,
            trigger=SWEEP.what,
            repair_grace=repair_grace,
        )
    probed = list(report.coverage.probed_nodes or [])
    store.record_probed(request.cluster, probed, request.now, report.coverage.software)
    return BatchResult("processed", request.cluster, len(request.nodes), probed, transitions)
