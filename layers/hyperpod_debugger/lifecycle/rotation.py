"""Which nodes a scheduled sweep probes, so that every node is probed at least once per period.

Pure: nodes, when each was last probed, the suspects, the clock and the budget in; a plan out.

A sweep cannot probe a 20,000-node cluster: Session Manager allows a few StartSession calls a second
per account, and a Lambda stops at 15 minutes. So each sweep probes

1. the *suspects* (nodes with an open on-node finding, or named by this sweep's API checks), so a
   fault is re-checked, and resolved, at the sweep's pace; at most half the per-sweep cap, so the
   rotation never stalls behind a bad day;
2. then the nodes probed longest ago (never-probed first, accelerator nodes before others at equal
   age): at least ``ceil(nodes × interval / period)`` of them, more when some are already due, up to
   the cap.

A node probed at time *t* is due again at ``t + period - interval`` (the last sweep that still lands
inside the period). When the cap cannot cover the cluster within the period, the plan says by how
much (``behind``) so the sweep can raise it instead of silently stretching the rotation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hyperpod_debugger.domain.catalog import spec_for
from hyperpod_debugger.domain.observations import ClusterNode

#: Only nodes whose SSM agent can answer are planned (others' status already tells their story).
PROBEABLE = frozenset({"Running"})


@dataclass(frozen=True, slots=True)
class RotationPlan:
    """Nodes to probe this sweep, in probing order, split into batches (one Lambda each)."""

    nodes: list[ClusterNode]
    batches: list[list[ClusterNode]]
    running: int
    suspects: int
    #: nodes the period asks for per sweep (``ceil(running × interval / period)``)
    quota: int
    #: nodes not probed within the period after this sweep (0 when the cap keeps up)
    behind: int
    never_probed: int
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, int]:
        return {
            "running": self.running,
            "planned": len(self.nodes),
            "batches": len(self.batches),
            "suspects": self.suspects,
            "quota": self.quota,
            "behind": self.behind,
            "never_probed": self.never_probed,
        }


def _accelerated(node: ClusterNode) -> bool:
    spec = spec_for(node.instance_type)
    return bool(spec is not None and spec.accelerated)


def chunk(nodes: Sequence[ClusterNode], size: int) -> list[list[ClusterNode]]:
    size = max(1, size)
    return [list(nodes[i : i + size]) for i in range(0, len(nodes), size)]


def plan_rotation(
    nodes: Iterable[ClusterNode],
    last_probed: Mapping[str, datetime],
    now: datetime,
    *,
    suspects: Iterable[str] = (),
    interval: timedelta = timedelta(minutes=15),
    period: timedelta = timedelta(days=1),
    cap: int = 480,
    batch_size: int = 50,
) -> RotationPlan:
    """Plan one sweep's probes.

    Parameters
    ----------
    nodes: the cluster's nodes (any status; only Running ones are planned).
    last_probed: instance id → when its probe document was last evaluated.
    suspects: instance ids to re-probe first (open on-node findings, API-check problems).
    interval: time between sweeps; period: every node is probed at least once per period.
    cap: the most nodes this sweep may probe; batch_size: nodes per probe Lambda.
    """
    if interval <= timedelta(0) or period <= timedelta(0):
        raise ValueError("interval and period must be positive")
    ready = sorted((n for n in nodes if n.status in PROBEABLE), key=lambda n: n.instance_id)
    cap = max(0, cap)
    wanted = set(suspects)
    suspect_nodes = [n for n in ready if n.instance_id in wanted][: cap // 2]
    chosen_ids = {n.instance_id for n in suspect_nodes}

    def age(node: ClusterNode) -> tuple[int, datetime, int, str]:
        last = last_probed.get(node.instance_id)
        return (0 if last is None else 1, last or now, 0 if _accelerated(node) else 1, node.instance_id)

    rest = sorted((n for n in ready if n.instance_id not in chosen_ids), key=age)
    due_at = period - interval if period > interval else timedelta(0)

    def due(node: ClusterNode) -> bool:
        last = last_probed.get(node.instance_id)
        return last is None or now - last >= due_at

    overdue = sum(1 for n in rest if due(n))
    # Enough per sweep to cover the nodes in one sweep less than the period: a node probed early in one sweep
    # may come late in a later one, so pacing at exactly the period would leave gaps of up to an interval more.
    cycle = period - interval if period > 2 * interval else period
    quota = math.ceil(len(ready) * (interval / cycle)) if ready else 0
    take = min(max(quota, overdue), max(0, cap - len(suspect_nodes)), len(rest))
    planned = suspect_nodes + rest[:take]
    behind = sum(1 for n in rest[take:] if due(n))
    never = sum(1 for n in ready if n.instance_id not in last_probed)
    notes: list[str] = []
    if quota > cap - len(suspect_nodes):
        sweeps = period / interval
        notes.append(
            f"{len(ready)} Running nodes need {quota} probes per sweep to be covered every "
            f"{_hours(period)}, but at most {cap - len(suspect_nodes)} fit in one sweep: a full rotation takes "
            f"about {_hours(interval * math.ceil(len(ready) / max(1, cap - len(suspect_nodes))))} "
            f"({sweeps:.0f} sweeps per period)"
        )
    elif behind:
        notes.append(f"{behind} node(s) are due and wait for the next sweep (catching up after new nodes or gaps)")
    return RotationPlan(
        nodes=planned,
        batches=chunk(planned, batch_size),
        running=len(ready),
        suspects=len(suspect_nodes),
        quota=quota,
        behind=behind,
        never_probed=never,
        notes=notes,
    )


def _hours(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:.0f} h" if hours >= 1 else f"{delta.total_seconds() / 60:.0f} min"


# --------------------------------------------------------------------------- node descriptors


def describe_node(node: ClusterNode, *, controller: bool = False) -> dict[str, str | None]:
    """A node as the state machine carries it between the cluster step and a probe batch (JSON)."""
    return {
        "instance_id": node.instance_id,
        "group": node.group,
        "instance_type": node.instance_type,
        "status": node.status,
        "hostname": node.hostname,
        "role": "controller" if controller else "compute",
    }


def node_of(descriptor: Mapping[str, object]) -> ClusterNode:
    """The inverse of :func:`describe_node`; raises ``ValueError`` naming the first missing field."""
    for key in ("instance_id", "group", "instance_type"):
        if not isinstance(descriptor.get(key), str) or not descriptor.get(key):
            raise ValueError(f"node descriptor without {key!r}")
    hostname = descriptor.get("hostname")
    return ClusterNode(
        instance_id=str(descriptor["instance_id"]),
        group=str(descriptor["group"]),
        instance_type=str(descriptor["instance_type"]),
        status=str(descriptor.get("status") or "Running"),
        message="",
        launch_time=None,
        hostname=str(hostname) if isinstance(hostname, str) and hostname else None,
    )
