"""One triage run: collect → evaluate → report. Used by the CLI and by the Lambda handlers."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from hyperpod_debugger.aws import sagemaker, sts
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.collector import CollectOptions, Collector
from hyperpod_debugger.aws.errors import ApiCallError, CredentialsError
from hyperpod_debugger.aws.k8s import OCCUPANCY_MAX_NODES
from hyperpod_debugger.checks.base import CheckContext
from hyperpod_debugger.checks.health_event import CHECK as HEALTH_EVENT_CHECK
from hyperpod_debugger.checks.health_event import health_event_findings
from hyperpod_debugger.checks.registry import ACTION_SECTIONS, ALL_CHECKS, run_checks
from hyperpod_debugger.domain import occupancy
from hyperpod_debugger.domain.model import (
    EXIT_COULD_NOT_LOOK,
    CheckCoverage,
    CheckStatus,
    ClusterRef,
    Coverage,
    Finding,
    Priority,
    RunError,
    Tag,
    TriageReport,
)
from hyperpod_debugger.domain.observations import Cluster, ClusterNode, ClusterObservation, NodeHealthReport, Observed
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.remediation import ladder
from hyperpod_debugger.remediation.verdict import RUNGS
from hyperpod_debugger.run_report import build_report, cluster_ref, coverage_of
from hyperpod_debugger.slurm.parse import controller_up, parse_jobs, parse_sinfo

if TYPE_CHECKING:
    from hyperpod_debugger.domain.occupancy import Occupancy


@dataclass(frozen=True, slots=True)
class TriageRequest:
    cluster: str  # name or ARN
    region: str
    node: str | None = None
    now: datetime | None = None
    event_window: timedelta = timedelta(hours=24)
    log_window: timedelta = timedelta(days=7)
    #: run the on-node probe through Session Manager (the CLI turns it on; tests and callers choose)
    probe: bool = False
    probe_options: ProbeOptions = ProbeOptions()
    #: only probe the node named in ``node`` (``hyperpod-debugger probe``): no cluster-level checks
    probe_only: bool = False
    #: the nodes a window of HyperPod events named (the monitor coalesces events): the checks read the whole
    #: cluster once and these nodes are probed, up to ``probe_options.max_nodes``; ``node`` stays None
    nodes: tuple[str, ...] = ()
    #: HyperPod's own verdicts (Node Health Events) on the nodes they name: reported beside our findings,
    #: and where HyperPod is rebooting or replacing a node itself, the ladder suggests no second action
    health: tuple[NodeHealthReport, ...] = ()
    #: refuse a ``node`` the cluster does not have before anything else runs (the CLI's --node; an event
    #: about a node that was just replaced still triages the cluster)
    check_node: bool = False
    #: told what the run is doing, step by step (the CLI prints it on a terminal's stderr); None: silent
    progress: Callable[[str], None] | None = field(default=None, compare=False)


def _all_unknown(reason: str) -> list[CheckCoverage]:
    return [CheckCoverage(check=c.id, status=CheckStatus.UNKNOWN, reason=reason) for c in ALL_CHECKS]


def _probe_one_node(
    req: TriageRequest,
    clients: AwsClients,
    cluster: Cluster,
    now: datetime,
    account: str | None,
    coverage: Callable[..., Coverage],
) -> TriageReport:
    """``hyperpod-debugger probe``: describe the one node, probe it, evaluate, apply the ladder."""
    from hyperpod_debugger.probe.runner import probe_cluster  # the runner loads when a run probes

    ref = cluster_ref(cluster, account)
    assert req.node is not None
    try:
        detail = sagemaker.describe_cluster_node(clients, cluster, req.node)
    except ApiCallError as exc:
        if exc.failure.kind == "not_found":
            message = f"Node {req.node} is not part of cluster {cluster.name}"
        else:
            message = f"Could not describe node {req.node}: {exc.failure.describe()}"
        finding = Finding(
            tag=Tag.FAIL if exc.failure.kind == "not_found" else Tag.UNKNOWN,
            priority=Priority.P0 if exc.failure.kind == "not_found" else Priority.P1,
            check="nodes.focus",
            section="F" if exc.failure.kind == "not_found" else "K",
            message=message,
            cluster_arn=cluster.arn,
            cluster_name=cluster.name,
            instance_id=req.node,
            evidence=[exc.failure.message],
        )
        return build_report(req.node, now, ref, [finding], coverage([]))
    node = ClusterNode(
        detail.instance_id,
        detail.group,
        detail.instance_type,
        detail.status,
        detail.message,
        detail.launch_time,
        hostname=detail.private_dns_hostname,
    )
    controllers = {node.instance_id} if ladder.is_controller(cluster, node) else set()
    probed = probe_cluster(
        clients,
        cluster,
        [node],
        now,
        focus=(node.instance_id,),
        suspects=[],
        controllers=controllers,
        options=replace(req.probe_options, window=req.event_window),
    )
    findings = ladder.apply(
        probed.findings, ladder.Target.of(cluster), {node.instance_id: node}, controllers=controllers
    )
    return build_report(req.node, now, ref, findings, coverage(probed.coverage, probed.probed, probed.software))


def run_triage(req: TriageRequest, clients: AwsClients | None = None) -> TriageReport:
    """One triage: the report the CLI prints and the monitor stores."""
    return triage_with_observation(req, clients)[0]


def triage_with_observation(
    req: TriageRequest, clients: AwsClients | None = None
) -> tuple[TriageReport, ClusterObservation | None]:
    """:func:`run_triage`, plus what was observed (None when the run stopped before collecting).

    The run in four steps: start (who we are, which cluster), collect (every observation, the Slurm
    controller's view), check and probe (the pure checks, HyperPod's own verdict, the on-node probes),
    refine (the ladder). The scheduled sweep plans its node probes from the observed node list.
    """
    now = req.now or datetime.now(UTC)
    clients = clients or AwsClients(req.region)
    coverage = coverage_of(clients)
    say = req.progress or (lambda _: None)
    say(f"reading cluster {req.cluster} in {req.region}")
    started = _start(req, clients, now, coverage)
    if isinstance(started, TriageReport):
        return started, None
    cluster, account = started
    if req.probe_only and req.node:
        return _probe_one_node(req, clients, cluster, now, account, coverage), None
    ref = cluster_ref(cluster, account)
    say("collecting: nodes, events, network, orchestrator, logs")
    obs = _collect(req, clients, cluster, now)
    if isinstance(obs, RunError):
        return build_report(req.node, now, ref, [], coverage(_all_unknown("credentials expired")), obs), None
    if obs.nodes.available and obs.nodes.value is not None:
        ref.node_count = len(obs.nodes.value)
    ctx = CheckContext(now=now, scope_node=req.node, event_window=req.event_window, log_window=req.log_window)
    say("checking")
    findings, checks = run_checks(obs, ctx)
    acting = _hyperpods_verdict(req, obs, findings, checks)
    probed = _probe(req, clients, cluster, obs, now, findings, checks)
    probed_nodes, software = probed if probed else (None, None)
    refined = ladder.refine(findings, obs, ctx, acting=acting)
    verdicts = ladder.verdicts(refined, obs, ctx, acting=acting)
    acted_on = [v.instance_id for v in verdicts if v.verdict in RUNGS]
    if acted_on:
        # Before a drain, reboot or replace is suggested, read what runs there, and word the suggestion by it.
        say(f"reading what runs on {len(acted_on)} node(s) before suggesting a node action")
        occupancy = _occupancy(clients, obs, acted_on)
        refined = ladder.refine(findings, obs, ctx, acting=acting, occupancy=occupancy)
        verdicts = ladder.verdicts(refined, obs, ctx, acting=acting, occupancy=occupancy)
    report = build_report(req.node, now, ref, refined, coverage(checks, probed_nodes, software), verdicts=verdicts)
    return report, obs


def _occupancy(clients: AwsClients, obs: ClusterObservation, ids: list[str]) -> dict[str, Observed[Occupancy]]:
    """What runs on each of ``ids``: the Slurm controller's job list (read in the same session as the rest
    of the controller's view), or the pods the API server lists on each Kubernetes node (one read each,
    at most ``OCCUPANCY_MAX_NODES``)."""
    nodes = {n.instance_id: n for n in obs.nodes.value or ()} if obs.nodes.available else {}
    if obs.cluster.orchestrator == "Slurm":
        names = {iid: nodes[iid].slurm_name or "" for iid in ids if iid in nodes and nodes[iid].slurm_name}
        if not obs.slurm.available or obs.slurm.value is None:
            unread: Observed[Occupancy] = Observed(failure=obs.slurm.failure, skipped=obs.slurm.skipped)
            return {iid: unread for iid in ids}
        outputs = obs.slurm.value.outputs
        jobs = parse_jobs(outputs["jobs"]) if "jobs" in outputs and controller_up(outputs.get("ping", "")) else None
        states = {n.name: n.state.raw for n in parse_sinfo(outputs.get("sinfo", ""))}
        return occupancy.from_slurm(jobs, names, states=states)
    if obs.cluster.orchestrator != "EKS":
        return {}
    k8s = obs.kubernetes.value if obs.kubernetes.available else None
    gone = obs.kubernetes.failure or (k8s.nodes.failure if k8s is not None else None)
    if k8s is None or (gone is not None and gone.kind in ("endpoint", "timeout")):
        # the API server could not be reached a moment ago: say so instead of waiting for it again
        unread = Observed(failure=gone, skipped=obs.kubernetes.skipped)
        return {iid: unread for iid in ids}
    k8s_names = {}
    if k8s.nodes.available:
        k8s_names = {n.instance_id: n.name for n in k8s.nodes.value or () if n.instance_id}
    names = {iid: k8s_names.get(iid) or (nodes[iid].eks_name if iid in nodes else f"hyperpod-{iid}") for iid in ids}
    read = list(names.items())[:OCCUPANCY_MAX_NODES]
    pods = Collector(clients).pods_on_nodes(obs.eks, [name for _, name in read])
    out: dict[str, Observed[Occupancy]] = {}
    for iid, name in read:
        listed = pods[name]
        out[iid] = (
            Observed.ok(occupancy.from_pods(iid, name, listed.value))
            if listed.available and listed.value is not None
            else Observed(failure=listed.failure, skipped=listed.skipped)
        )
    for iid, _ in list(names.items())[OCCUPANCY_MAX_NODES:]:
        out[iid] = Observed.skip(f"more than {OCCUPANCY_MAX_NODES} nodes to act on; only the first were read")
    return out


def _node_absent(clients: AwsClients, cluster: Cluster, node: str) -> str | None:
    """Why ``node`` is not one of the cluster's, or None (also when the API cannot say: the triage goes on
    and reports the node's findings, or their absence)."""
    try:
        sagemaker.describe_cluster_node(clients, cluster, node)
    except ApiCallError as exc:
        if exc.failure.kind == "not_found" or exc.failure.code == "ValidationException":
            return (
                f"--node {node} is not a node of cluster {cluster.name}: list its nodes with "
                f"`aws sagemaker list-cluster-nodes --cluster-name {cluster.name} --region {clients.region}`"
            )
    return None


def did_you_mean(wanted: str, names: list[str]) -> str:
    """``"; did you mean a or b?"`` for the names close to ``wanted`` (case aside), else ``""``. An ARN is
    not compared (it names the cluster by id)."""
    if wanted.startswith("arn:") or not names:
        return ""
    by_lower = {name.lower(): name for name in names}
    close = difflib.get_close_matches(wanted.lower(), list(by_lower), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(by_lower[c] for c in close)}?" if close else ""


def _start(
    req: TriageRequest, clients: AwsClients, now: datetime, coverage: Callable[..., Coverage]
) -> tuple[Cluster, str | None] | TriageReport:
    """Who we are and which cluster, or the report of why the triage cannot start."""
    ref = ClusterRef(name=req.cluster, region=req.region)
    try:
        account = sts.caller_account(clients)
        ref.account_id = account
        cluster = sagemaker.describe_cluster(clients, req.cluster)
        if req.node and req.check_node and (absent := _node_absent(clients, cluster, req.node)) is not None:
            ref.arn, ref.status = cluster.arn, cluster.status
            error = RunError(kind="invalid_argument", message=absent)
            return build_report(req.node, now, ref, [], coverage(_all_unknown("the node is not in the cluster")), error)
        return cluster, account
    except CredentialsError as exc:
        error = RunError(kind="credentials", message=f"AWS credentials are missing, expired or rejected: {exc}")
        return build_report(req.node, now, ref, [], coverage(_all_unknown("no usable credentials")), error)
    except sagemaker.ClusterNotFound as exc:
        # ListClusters only now, when DescribeCluster said there is no such cluster: the Region's names, and
        # the close ones as "did you mean" (a misspelt Region gets the same hint)
        summaries: list[dict[str, Any]] = []
        try:
            summaries = sagemaker.list_clusters(clients)
        except (ApiCallError, CredentialsError):
            summaries = []
        names = [f"{c.get('ClusterName')} ({c.get('ClusterStatus')})" for c in summaries]
        error = RunError(
            kind="cluster_not_found",
            message=f"No HyperPod cluster {req.cluster!r} in {req.region}: {str(exc).rstrip('.')}"
            + did_you_mean(req.cluster, [str(c.get("ClusterName")) for c in summaries if c.get("ClusterName")]),
            clusters_in_region=names,
        )
        return build_report(req.node, now, ref, [], coverage(_all_unknown("cluster not found")), error)
    except ApiCallError as exc:
        failure = exc.failure
        if failure.kind == "denied":
            finding = Finding(
                tag=Tag.WARN,
                priority=Priority.P1,
                check="iam.permission",
                section=ACTION_SECTIONS.get(failure.action, "F"),
                message=f"Missing IAM permission {failure.action} (blocked: the whole triage)",
                evidence=[failure.message],
                root_cause=f"The identity running the triage is not allowed to call {failure.action}.",
            )
            report = build_report(req.node, now, ref, [finding], coverage(_all_unknown(failure.describe())))
            report.exit_code = EXIT_COULD_NOT_LOOK  # nothing could be looked at: not "problems found"
            return report
        kind = "endpoint" if failure.kind in ("endpoint", "timeout") else "internal"
        error = RunError(kind=kind, message=f"Cannot start the triage: {failure.describe()}")
        return build_report(req.node, now, ref, [], coverage(_all_unknown(failure.describe())), error)


def _collect(req: TriageRequest, clients: AwsClients, cluster: Cluster, now: datetime) -> ClusterObservation | RunError:
    """Every observation of the cluster, and on Slurm the controller's view (a session, when probing)."""
    opts = CollectOptions(now=now, scope_node=req.node, event_window=req.event_window, log_window=req.log_window)
    try:
        obs = Collector(clients).collect(cluster, opts)
    except CredentialsError as exc:
        return RunError(kind="credentials", message=f"AWS credentials expired during the run: {exc}")
    if cluster.orchestrator == "Slurm":
        if not req.probe:
            obs.slurm = Observed.skip("reading Slurm needs a session on the controller, and probing was not asked for")
        elif obs.nodes.available and obs.nodes.value is not None:
            from hyperpod_debugger.probe.pinned import ssm_runner
            from hyperpod_debugger.slurm.query import query_controller

            obs.slurm = query_controller(
                clients,
                cluster,
                obs.nodes.value,
                runner_factory=ssm_runner,
                timeout=req.probe_options.timeout,
                documents=req.probe_options.documents,
            )
    return obs


def _hyperpods_verdict(
    req: TriageRequest, obs: ClusterObservation, findings: list[Finding], checks: list[CheckCoverage]
) -> dict[str, str]:
    """HyperPod's own verdicts (Node Health Events) beside ours; the nodes it is repairing. The check's
    coverage names the nodes it looked at: it resolves nothing about any other node."""
    if not req.health:
        return {}
    latest = {r.instance_id: r for r in sorted(req.health, key=_reported_at)}  # a node's last word counts
    acting: dict[str, str] = {}
    for report in latest.values():
        findings += health_event_findings(obs, report)
        if report.hyperpod_acting:
            acting[report.instance_id] = f"its health agent's repair action is {report.repair_action}"
    checks.append(CheckCoverage(check=HEALTH_EVENT_CHECK, status=CheckStatus.RAN, nodes=sorted(latest)))
    return acting


def _reported_at(report: NodeHealthReport) -> datetime:
    return report.at or datetime.min.replace(tzinfo=UTC)


def _probe(
    req: TriageRequest,
    clients: AwsClients,
    cluster: Cluster,
    obs: ClusterObservation,
    now: datetime,
    findings: list[Finding],
    checks: list[CheckCoverage],
) -> tuple[list[str], dict[str, dict[str, str]]] | None:
    """The on-node probes (suspects first), their findings and coverage added; the nodes probed and what each
    runs (None: no probe ran)."""
    if req.probe and req.probe_options.max_nodes <= 0:
        reason = "no node probes in this run (max 0 nodes): they run separately, in batches"
        checks.append(CheckCoverage(check="probe.session", status=CheckStatus.SKIPPED, reason=reason))
        return None
    if not (req.probe and obs.nodes.available and obs.nodes.value is not None):
        reason = "not asked for (--no-probe)" if not req.probe else "the node list could not be read"
        checks.append(CheckCoverage(check="probe.session", status=CheckStatus.SKIPPED, reason=reason))
        return None
    from hyperpod_debugger.probe.runner import probe_cluster  # the runner and its evaluators load when a run probes

    probed = probe_cluster(
        clients,
        cluster,
        obs.nodes.value,
        now,
        focus=req.nodes or ((req.node,) if req.node else ()),
        suspects=[f.instance_id for f in findings if f.instance_id and f.is_problem],
        controllers=ladder.slurm_controllers(obs),
        options=replace(req.probe_options, window=req.event_window, progress=req.progress),
    )
    findings += probed.findings
    checks += probed.coverage
    return probed.probed, probed.software
