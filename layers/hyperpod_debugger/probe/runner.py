"""On-node probing inside a triage: choose the nodes, run the probe through Session Manager at a pace that
yields to people's sessions while the account is throttled, evaluate each document, and report per-node
outcomes and coverage."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from hyperpod_debugger.aws.ssm_types import CommandResult, Runner, SessionError, TargetError, session_target
from hyperpod_debugger.domain.model import CheckCoverage, CheckStatus, Finding
from hyperpod_debugger.probe import consistency, versions
from hyperpod_debugger.probe import pace as pacing
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.delivery import probe_command
from hyperpod_debugger.probe.fleet import NodeProbe, order_nodes, outcome_findings, probe_fleet
from hyperpod_debugger.probe.pace import PaceReport, SessionPace, throttle_count
from hyperpod_debugger.probe.pinned import ssm_runner
from hyperpod_debugger.probe.registry import evaluate

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.aws.ssm_documents import SessionDocuments
    from hyperpod_debugger.domain.observations import Cluster, ClusterNode
    from hyperpod_debugger.probe.options import ProbeOptions

#: Nodes whose SSM agent can answer; others are skipped (their status already says why).
PROBEABLE = frozenset({"Running"})


@dataclass(frozen=True, slots=True)
class ProbeRun:
    findings: list[Finding]
    coverage: list[CheckCoverage]
    probes: list[NodeProbe]
    #: how the StartSession calls were paced (None: no session was asked for)
    pace: PaceReport | None = None
    #: what each probed node runs (§ E), as read from its document
    versions: list[consistency.NodeVersions] = field(default_factory=list)

    @property
    def probed(self) -> list[str]:
        """Nodes whose probe document was evaluated: only their on-node findings may be resolved."""
        return [p.node.instance_id for p in self.probes if p.doc is not None]

    @property
    def software(self) -> dict[str, dict[str, str]]:
        """Instance id → component → version (or "none found"), for the nodes whose versions were read."""
        return {n.instance_id: table for n in self.versions if (table := consistency.stored_form(n.versions))}


def select_nodes(
    nodes: Sequence[ClusterNode], *, focus: Sequence[str], suspects: Sequence[str], max_nodes: int
) -> tuple[list[ClusterNode], str]:
    """(nodes to probe, a sentence for the coverage) — never a different node than the ones asked for.

    ``focus``: the nodes a run is about (``--node``, or the nodes a window of HyperPod events named): only
    those, in that order; one asked-for node is probed whatever its status, several only while Running and
    up to ``max_nodes`` (the rest are named as left to the sweep)."""
    if len(focus) == 1:
        chosen = [n for n in nodes if n.instance_id == focus[0]]
        return chosen, (f"node {focus[0]}" if chosen else f"node {focus[0]} is not in the node list")
    if focus:
        by_id = {n.instance_id: n for n in nodes}
        named = [by_id[iid] for iid in dict.fromkeys(focus) if iid in by_id]
        ready = [n for n in named if n.status in PROBEABLE]
        chosen = ready[: max(0, max_nodes)]
        note = f"{len(chosen)} of the {len(dict.fromkeys(focus))} node(s) the events named"
        left = [
            f"{len(dict.fromkeys(focus)) - len(named)} not in the node list" if len(named) < len(set(focus)) else "",
            f"{len(named) - len(ready)} not Running" if len(ready) < len(named) else "",
            f"{len(ready) - len(chosen)} over the cap of {max_nodes}, left to the sweep (suspects first)"
            if len(chosen) < len(ready)
            else "",
        ]
        if any(left):
            note += ": " + ", ".join(x for x in left if x)
        return chosen, note
    ready = [n for n in nodes if n.status in PROBEABLE]
    ordered = order_nodes(ready, suspects)
    chosen = ordered[: max(0, max_nodes)]
    note = f"{len(chosen)} of {len(ready)} Running node(s)"
    if len(chosen) < len(ready):
        note += f" (capped at {max_nodes}; suspect and accelerator nodes first)"
    return chosen, note


def _role(cluster: Cluster, node: ClusterNode, controllers: set[str]) -> str:
    return "controller" if node.instance_id in controllers else "compute"


def probe_cluster(
    clients: AwsClients,
    cluster: Cluster,
    nodes: Sequence[ClusterNode],
    now: datetime,
    *,
    focus: Sequence[str],
    suspects: Sequence[str],
    controllers: set[str],
    options: ProbeOptions,
    runner_factory: Callable[[AwsClients, str, float, SessionDocuments], Runner] = ssm_runner,
) -> ProbeRun:
    chosen, note = select_nodes(nodes, focus=focus, suspects=suspects, max_nodes=options.max_nodes)
    if not chosen:
        reason = f"no node to probe: {note}"
        return ProbeRun([], [CheckCoverage(check="probe.session", status=CheckStatus.SKIPPED, reason=reason)], [])
    targets = _targets(cluster, chosen)
    runner = runner_factory(clients, cluster.region, options.timeout, options.documents)
    probes, paced = _run_sessions(clients, targets, runner, options)
    if options.on_pace is not None:
        options.on_pace(paced)
    findings = outcome_findings(probes, cluster_arn=cluster.arn, cluster_name=cluster.name, region=cluster.region)
    node_findings, node_coverage = _evaluate_documents(probes, cluster, now, controllers, options.window)
    findings.extend(node_findings)
    # § E: the probed nodes' software compared per instance group (all documents of this run are here)
    fleet_versions = [
        consistency.NodeVersions(p.node.instance_id, p.node.group, versions.parse(p.doc)) for p in probes if p.doc
    ]
    skew_findings, skew_coverage = consistency.compare(
        fleet_versions, cluster, group_sizes=_group_sizes(cluster, nodes, batch=options.batch), partial=options.batch
    )
    findings.extend(skew_findings)
    coverage = [_session_coverage(probes, note, paced), *_per_check_coverage(node_coverage), *skew_coverage]
    return ProbeRun(findings, coverage, probes, paced, fleet_versions)


def _targets(cluster: Cluster, chosen: Sequence[ClusterNode]) -> list[tuple[ClusterNode, str]]:
    """Each node with its Session Manager target; a node whose target cannot be formed gets an ``(invalid: …)``
    stand-in, which fails as that node's outcome without reaching SSM."""
    targets: list[tuple[ClusterNode, str]] = []
    for node in chosen:
        try:
            targets.append((node, session_target(cluster.arn, node.group, node.instance_id)))
        except TargetError as exc:
            targets.append((node, f"(invalid: {exc})"))
    return targets


def _run_sessions(
    clients: AwsClients, targets: list[tuple[ClusterNode, str]], runner: Runner, options: ProbeOptions
) -> tuple[list[NodeProbe], PaceReport]:
    """The probe run on the targets at the paced rate: the probes of the nodes whose session started, and the
    pace's report (which names the nodes not started before the round closed)."""
    # The pace, not the fleet, closes the round: one clock decides both the spacing and the close.
    clock = options.clock or pacing.SYSTEM_CLOCK
    until = None
    if options.start_until is not None:
        until = clock.monotonic() + (options.start_until - clock.wall()).total_seconds()
    pace = SessionPace(options.rate, throttled=throttle_count(clients), clock=clock, deadline=until)
    deferred: set[str] = set()
    done = 0

    async def run(target: str, command: str) -> CommandResult:  # invalid targets never reach SSM
        nonlocal done
        if not target.startswith("(invalid") and not await pace.start():
            deferred.add(target)  # left out of the result below: not probed, nothing concluded
            raise SessionError("ERROR", "not started: the round closed")
        try:
            if target.startswith("(invalid"):
                raise SessionError("ERROR", target[1:-1])
            return await runner(target, command)
        finally:
            done += 1
            if options.progress is not None:
                options.progress(f"probing nodes through Session Manager: {done} of {len(targets)} done")

    # the fleet's own bucket stays at the run's rate: a ceiling the pace only goes below
    probes = asyncio.run(probe_fleet(targets, probe_command(), run, rate=options.rate, concurrency=options.concurrency))
    left = [node.instance_id for node, target in targets if target in deferred]
    return [p for p in probes if p.target not in deferred], pace.report(left)


def _evaluate_documents(
    probes: Sequence[NodeProbe], cluster: Cluster, now: datetime, controllers: set[str], window: timedelta
) -> tuple[list[Finding], list[CheckCoverage]]:
    """Every evaluator over each probe document: the findings, and each node's coverage entries."""
    findings: list[Finding] = []
    coverage: list[CheckCoverage] = []
    for probe in probes:
        if probe.doc is None:
            continue
        ctx = ProbeContext(
            instance_type=probe.node.instance_type,
            now=now,
            orchestrator=cluster.orchestrator if cluster.orchestrator in ("EKS", "Slurm") else None,
            role=_role(cluster, probe.node, controllers),  # type: ignore[arg-type]
            window=window,
            instance_id=probe.node.instance_id,
            instance_group=probe.node.group,
            cluster_arn=cluster.arn,
            cluster_name=cluster.name,
        )
        node_findings, node_coverage = evaluate(probe.doc, ctx)
        findings.extend(node_findings)
        coverage.extend(node_coverage)
    return findings, coverage


def _group_sizes(cluster: Cluster, nodes: Sequence[ClusterNode], *, batch: bool) -> dict[str, int]:
    """The Running nodes of each instance group, against which the software comparison says it saw part."""
    group_sizes = Counter(n.group for n in nodes if n.status in PROBEABLE)
    if batch:  # the batch knows its own nodes only: the group's size is HyperPod's count
        for group in cluster.instance_groups:
            group_sizes[group.name] = max(group_sizes[group.name], group.current_count or 0)
    return dict(group_sizes)


def _session_coverage(probes: Sequence[NodeProbe], note: str, paced: PaceReport) -> CheckCoverage:
    """The sessions' coverage: which nodes were probed, their outcomes, and the nodes the round left."""
    left = paced.not_started
    outcomes = Counter(p.outcome for p in probes)
    summary = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "none started"
    if left and paced.yielded:
        summary += (
            f"; {len(left)} not started before the window closed: Session Manager throttled StartSession "
            f"{paced.throttles} time(s) and the probes slowed from {paced.ceiling:.2f}/s to {paced.lowest:.2f}/s "
            "to leave the account's rate to people's sessions (they stay due and lead the next plan)"
        )
    elif left:
        summary += f"; {len(left)} not started before the window closed (they lead the next plan)"
    return CheckCoverage(
        check="probe.session",
        status=CheckStatus.RAN if outcomes.get("OK") else CheckStatus.UNKNOWN,
        reason=f"probed {note}: {summary}",
    )


def _per_check_coverage(entries: Sequence[CheckCoverage]) -> list[CheckCoverage]:
    """Each check's coverage across the nodes: on how many it ran, was skipped or unknown, and one reason."""
    per_check: dict[str, Counter[str]] = defaultdict(Counter)
    reasons: dict[str, str] = {}
    for entry in entries:
        per_check[entry.check][entry.status.value] += 1
        if entry.reason and entry.check not in reasons:
            reasons[entry.check] = entry.reason
    coverage: list[CheckCoverage] = []
    for check, counts in per_check.items():
        ran = counts.get("ran", 0)
        status = CheckStatus.RAN if ran else (CheckStatus.UNKNOWN if counts.get("unknown") else CheckStatus.SKIPPED)
        detail = ", ".join(f"{k} on {v}" for k, v in sorted(counts.items()))
        reason = detail if not reasons.get(check) else f"{detail}; e.g. {reasons[check]}"
        coverage.append(CheckCoverage(check=check, status=status, reason=reason))
    return coverage
