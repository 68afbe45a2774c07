"""On-node probing inside a triage: choose the nodes, run the probe through Session Manager,
evaluate each document, and report per-node outcomes and coverage."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.ssm_documents import NO_DOCUMENTS, SessionDocuments, pinned_nonce
from hyperpod_debugger.aws.ssm_types import CommandResult, SessionError, TargetError, session_target
from hyperpod_debugger.domain.model import CheckCoverage, CheckStatus, Finding
from hyperpod_debugger.domain.observations import Cluster, ClusterNode
from hyperpod_debugger.probe.base import ProbeContext
from hyperpod_debugger.probe.delivery import probe_command
from hyperpod_debugger.probe.fleet import NodeProbe, Runner, order_nodes, outcome_findings, probe_fleet
from hyperpod_debugger.probe.registry import evaluate

#: Nodes whose SSM agent can answer; others are skipped (their status already says why).
PROBEABLE = frozenset({"Running"})


@dataclass(frozen=True, slots=True)
class ProbeOptions:
    max_nodes: int = 25
    rate: float = 3.0
    concurrency: int = 16
    timeout: float = 180.0
    window: timedelta = timedelta(hours=24)
    #: pinned Session documents (the monitor's stack): sessions run only the commands they carry
    documents: SessionDocuments = NO_DOCUMENTS
    #: told "probed 3 of 25 nodes" as sessions end (the CLI shows it on a terminal); None: silent
    progress: Callable[[str], None] | None = field(default=None, compare=False)
    #: no session starts after this moment (the sweep's round closes); the nodes not started stay due
    start_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class ProbeRun:
    findings: list[Finding]
    coverage: list[CheckCoverage]
    probes: list[NodeProbe]

    @property
    def probed(self) -> list[str]:
        """Nodes whose probe document was evaluated: only their on-node findings may be resolved."""
        return [p.node.instance_id for p in self.probes if p.doc is not None]


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


def ssm_runner(clients: AwsClients, region: str, timeout: float, documents: SessionDocuments = NO_DOCUMENTS) -> Runner:
    """Commands through Session Manager. With pinned ``documents`` a command runs only through the
    document that carries it; a command no document carries is refused before any call."""
    from hyperpod_debugger.aws import ssm_session

    run = partial(
        ssm_session.run_command,
        clients.client("ssm"),
        credentials=clients.credentials(),
        region=region,
        timeout=timeout,
    )
    if not documents:
        return run

    async def pinned(target: str, command: str) -> CommandResult:
        document = documents.for_command(command)
        if document is None:
            raise SessionError("DENIED", "no pinned session document carries this command: it is not run")
        return await run(target, command, document=document, nonce=pinned_nonce(command))

    return pinned


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
    targets: list[tuple[ClusterNode, str]] = []
    findings: list[Finding] = []
    for node in chosen:
        try:
            targets.append((node, session_target(cluster.arn, node.group, node.instance_id)))
        except TargetError as exc:
            targets.append((node, f"(invalid: {exc})"))
    runner = runner_factory(clients, cluster.region, options.timeout, options.documents)

    done = 0

    async def run(target: str, command: str) -> CommandResult:  # invalid targets never reach SSM
        nonlocal done
        try:
            if target.startswith("(invalid"):
                raise SessionError("ERROR", target[1:-1])
            return await runner(target, command)
        finally:
            done += 1
            if options.progress is not None:
                options.progress(f"probing nodes through Session Manager: {done} of {len(targets)} done")

    until = None
    if options.start_until is not None:
        until = time.monotonic() + (options.start_until - datetime.now(UTC)).total_seconds()
    probes = asyncio.run(
        probe_fleet(
            targets, probe_command(), run, rate=options.rate, concurrency=options.concurrency, start_until=until
        )
    )
    not_started = len(targets) - len(probes)
    findings.extend(outcome_findings(probes, cluster_arn=cluster.arn, cluster_name=cluster.name, region=cluster.region))

    per_check: dict[str, Counter[str]] = defaultdict(Counter)
    reasons: dict[str, str] = {}
    for probe in probes:
        if probe.doc is None:
            continue
        ctx = ProbeContext(
            instance_type=probe.node.instance_type,
            now=now,
            orchestrator=cluster.orchestrator if cluster.orchestrator in ("EKS", "Slurm") else None,
            role=_role(cluster, probe.node, controllers),  # type: ignore[arg-type]
            window=options.window,
            instance_id=probe.node.instance_id,
            instance_group=probe.node.group,
            cluster_arn=cluster.arn,
            cluster_name=cluster.name,
        )
        node_findings, node_coverage = evaluate(probe.doc, ctx)
        findings.extend(node_findings)
        for entry in node_coverage:
            per_check[entry.check][entry.status.value] += 1
            if entry.reason and entry.check not in reasons:
                reasons[entry.check] = entry.reason
    outcomes = Counter(p.outcome for p in probes)
    summary = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "none started"
    if not_started:
        summary += f"; {not_started} not started before the window closed (they lead the next plan)"
    coverage = [
        CheckCoverage(
            check="probe.session",
            status=CheckStatus.RAN if outcomes.get("OK") else CheckStatus.UNKNOWN,
            reason=f"probed {note}: {summary}",
        )
    ]
    for check, counts in per_check.items():
        ran = counts.get("ran", 0)
        status = CheckStatus.RAN if ran else (CheckStatus.UNKNOWN if counts.get("unknown") else CheckStatus.SKIPPED)
        detail = ", ".join(f"{k} on {v}" for k, v in sorted(counts.items()))
        reason = detail if not reasons.get(check) else f"{detail}; e.g. {reasons[check]}"
        coverage.append(CheckCoverage(check=check, status=status, reason=reason))
    return ProbeRun(findings, coverage, probes)
