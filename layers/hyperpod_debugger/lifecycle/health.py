"""Fleet health, the numbers the sweep's metrics carry: one verdict per node, counted per cluster and per
instance group. Pure: the node list, the cluster's open findings, the probe clock and the time in.

A node's verdict comes from what is stored about it, weightiest first:

* ``FAIL`` / ``WARN`` / ``UNKNOWN``: it has an open (or acknowledged) finding with that tag;
* ``NOT_RUNNING``: no open finding, and HyperPod does not list it Running (still provisioning, being
  replaced or rebooted): nothing says it is sick, nothing says it is healthy;
* ``UNOBSERVED``: Running, no open finding, but probing is on and its probe document was not evaluated
  within the probe period (never, or too long ago): nobody looked, so it is not counted healthy;
* ``HEALTHY``: Running, no open finding, and (with probing on) probed within the period.

The *healthy share* is HEALTHY ÷ nodes; the *UNKNOWN share* is UNKNOWN ÷ nodes. Neither counts a node
we did not look at as healthy (UNKNOWN is neither FAIL nor PASS).

The *oldest probe age* is the longest time a Running node has gone without an evaluated probe document.
A node never probed counts from the later of its launch and the oldest probe the rotation still remembers
(its records live a week), since before that the monitor was not there to probe it; with no probe record
at all for the cluster the rotation has not started and the age is not reported (the UNKNOWN share says
when every probe fails).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.lifecycle.findings import State, StoredFinding

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import ClusterNode

#: Every verdict, in the order metrics and dashboards list them.
VERDICTS = ("HEALTHY", "WARN", "FAIL", "UNKNOWN", "UNOBSERVED", "NOT_RUNNING")
PRIORITIES = (Priority.P0.value, Priority.P1.value, Priority.P2.value)
_TAG_VERDICT = ((Tag.FAIL, "FAIL"), (Tag.WARN, "WARN"), (Tag.UNKNOWN, "UNKNOWN"))


@dataclass(frozen=True)
class GroupHealth:
    """One cluster's numbers, or one instance group's (``group`` None: the whole cluster)."""

    cluster: str
    group: str | None
    verdicts: Mapping[str, int]
    open_by_priority: Mapping[str, int]
    #: None: not measured (probing off, or the rotation has not probed anything in the cluster yet)
    oldest_probe_age_s: float | None = None
    never_probed: int = 0

    @property
    def nodes(self) -> int:
        return sum(self.verdicts.values())

    @property
    def healthy_share(self) -> float | None:
        """Percent of the nodes that are HEALTHY (None without nodes)."""
        return 100.0 * self.verdicts.get("HEALTHY", 0) / self.nodes if self.nodes else None

    @property
    def unknown_share(self) -> float | None:
        """Percent of the nodes whose verdict is UNKNOWN (None without nodes)."""
        return 100.0 * self.verdicts.get("UNKNOWN", 0) / self.nodes if self.nodes else None


@dataclass(frozen=True)
class ClusterHealth:
    cluster: GroupHealth
    groups: list[GroupHealth] = field(default_factory=list)
    #: instance id → verdict, for every node that is not HEALTHY (the dashboard's problem nodes)
    problems: dict[str, str] = field(default_factory=dict)


def node_verdict(
    node: ClusterNode,
    findings: Iterable[StoredFinding],
    probed_at: datetime | None,
    now: datetime,
    period: timedelta | None,
) -> str:
    """One node's verdict (see the module's docstring); ``period`` None: probing is off."""
    tags = {f.tag for f in findings if f.state is not State.RESOLVED}
    for tag, verdict in _TAG_VERDICT:
        if tag in tags:
            return verdict
    if node.status != "Running":
        return "NOT_RUNNING"
    if period is not None and (probed_at is None or now - probed_at > period):
        return "UNOBSERVED"
    return "HEALTHY"


def fleet_health(
    cluster: str,
    nodes: Iterable[ClusterNode],
    findings: Iterable[StoredFinding],
    last_probed: Mapping[str, datetime],
    now: datetime,
    *,
    period: timedelta | None,
) -> ClusterHealth:
    """The cluster's and each instance group's health. ``findings``: the cluster's stored findings (resolved
    ones are ignored); ``last_probed``: instance id → when its probe document was last evaluated;
    ``period``: the probe period (None: probing is off, no node is UNOBSERVED and no age is measured)."""
    listed = list(nodes)
    open_findings = [f for f in findings if f.state is not State.RESOLVED]
    by_node: dict[str, list[StoredFinding]] = {}
    for finding in open_findings:
        if finding.instance_id:
            by_node.setdefault(finding.instance_id, []).append(finding)
    memory_start = min(last_probed.values()) if last_probed else None
    group_of = {n.instance_id: n.group for n in listed}

    verdicts: dict[str | None, Counter[str]] = {None: Counter()}
    ages: dict[str | None, list[float]] = {None: []}
    never: Counter[str | None] = Counter()
    problems: dict[str, str] = {}
    for node in listed:
        verdict = node_verdict(node, by_node.get(node.instance_id, ()), last_probed.get(node.instance_id), now, period)
        for key in (None, node.group):
            verdicts.setdefault(key, Counter())[verdict] += 1
        if verdict != "HEALTHY":
            problems[node.instance_id] = verdict
        if period is None or node.status != "Running" or memory_start is None:
            continue
        probed = last_probed.get(node.instance_id)
        if probed is None:
            never[None] += 1
            never[node.group] += 1
            since = max(memory_start, node.launch_time) if node.launch_time else memory_start
        else:
            since = probed
        for key in (None, node.group):
            ages.setdefault(key, []).append(max(0.0, (now - since).total_seconds()))

    priorities: dict[str | None, Counter[str]] = {None: Counter()}
    for finding in open_findings:
        if finding.priority is None:
            continue
        keys: list[str | None] = [None]
        group = group_of.get(finding.instance_id or "")
        if group is not None:
            keys.append(group)
        for key in keys:
            priorities.setdefault(key, Counter())[finding.priority.value] += 1

    measured = period is not None and memory_start is not None

    def health(key: str | None) -> GroupHealth:
        return GroupHealth(
            cluster=cluster,
            group=key,
            verdicts={v: verdicts.get(key, Counter())[v] for v in VERDICTS},
            open_by_priority={p: priorities.get(key, Counter())[p] for p in PRIORITIES},
            oldest_probe_age_s=max(ages[key]) if measured and ages.get(key) else None,
            never_probed=never[key],
        )

    groups = sorted({n.group for n in listed})
    return ClusterHealth(cluster=health(None), groups=[health(g) for g in groups], problems=problems)
