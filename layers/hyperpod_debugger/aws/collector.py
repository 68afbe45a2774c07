"""Collect everything the cluster-level checks need, turning each failed call into an
explicit, typed gap instead of an empty list.

Order matters only where one answer feeds the next question (the cluster description names
the subnets, SGs and EKS cluster; the node list names the lifecycle streams to read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from hyperpod_debugger.aws import ec2, eks, k8s, logs, quotas, sagemaker
from hyperpod_debugger.aws.errors import ApiCallError
from hyperpod_debugger.domain.observations import (
    ApiFailure,
    Cluster,
    ClusterEvent,
    ClusterNode,
    ClusterObservation,
    EksCluster,
    EventWindow,
    LogObservation,
    NetworkObservation,
    Observed,
)

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.aws.k8s_jobs import PyTorchJobRead
    from hyperpod_debugger.domain.orchestrators import K8sPod, KubernetesObservation

T = TypeVar("T")

#: Warn/Error events described one by one (for EventMetadata.FailureMessage) per run.
MAX_DESCRIBED_EVENTS = 50
#: Node statuses whose lifecycle-script log is worth reading in full.
SUSPECT_STATUSES = frozenset({"Failure", "NotFound"})


@dataclass(frozen=True, slots=True)
class CollectOptions:
    now: datetime
    scope_node: str | None = None
    event_window: timedelta = timedelta(hours=24)
    log_window: timedelta = timedelta(days=7)


class Collector:
    def __init__(self, clients: AwsClients) -> None:
        self.clients = clients
        self.failures: list[ApiFailure] = []

    def observe(self, fn: Callable[[], T]) -> Observed[T]:
        try:
            return Observed.ok(fn())
        except ApiCallError as exc:
            self.failures.append(exc.failure)
            return Observed.failed(exc.failure)

    # ------------------------------------------------------------------ pieces

    def events(self, cluster: Cluster, opts: CollectOptions) -> Observed[EventWindow]:
        if cluster.provisioning_mode != "Continuous":
            return Observed.skip(
                "cluster events exist only for clusters with NodeProvisioningMode=Continuous "
                f"(this cluster: {cluster.provisioning_mode or 'not set'})"
            )
        start = opts.now - opts.event_window

        def fetch() -> EventWindow:
            listed = sagemaker.list_cluster_events(self.clients, cluster, start, opts.now, opts.scope_node)
            return self._describe_failures(cluster, listed, start, opts.now)

        return self.observe(fetch)

    def _describe_failures(
        self, cluster: Cluster, listed: list[ClusterEvent], start: datetime, end: datetime
    ) -> EventWindow:
        """Summaries lack EventMetadata, where the real failure text lives (e.g. the capacity
        message). Describe Warn/Error events, one per distinct (description, group), up to a cap."""
        described: list[ClusterEvent] = []
        done: dict[tuple[str, str | None], tuple[str, ...]] = {}
        undescribed = 0
        for event in listed:
            if event.level not in ("Warn", "Error"):
                described.append(event)
                continue
            key = (event.description, event.instance_group)
            if key not in done:
                if len(done) >= MAX_DESCRIBED_EVENTS:
                    undescribed += 1
                    described.append(event)
                    continue
                try:
                    done[key] = tuple(sagemaker.describe_cluster_event(self.clients, cluster, event.event_id))
                except ApiCallError as exc:
                    self.failures.append(exc.failure)
                    done[key] = ()
            described.append(
                ClusterEvent(
                    event_id=event.event_id,
                    time=event.time,
                    level=event.level,
                    resource_type=event.resource_type,
                    description=event.description,
                    instance_group=event.instance_group,
                    instance_id=event.instance_id,
                    failure_messages=done[key],
                    described=True,
                )
            )
        return EventWindow(start=start, end=end, events=tuple(described), undescribed=undescribed)

    def network(self, cluster: Cluster, extra_sgs: list[str]) -> NetworkObservation:
        missing: list[str] = []

        def sgs() -> dict:
            found, gone = ec2.describe_security_groups(self.clients, [*cluster.security_group_ids(), *extra_sgs])
            missing.extend(gone)
            return found

        security_groups = self.observe(sgs)
        subnets = self.observe(lambda: ec2.describe_subnets(self.clients, cluster.subnet_ids()))
        vpc_ids = sorted({s.vpc_id for s in (subnets.value or {}).values()})
        if subnets.available:
            # Tags only feed the IaC note; without them the note asks the operator instead.
            tags = self.observe(lambda: ec2.vpc_tags(self.clients, vpc_ids)).value or {}
            vpcs = self.observe(lambda: {v: ec2.describe_vpc(self.clients, v, tags.get(v)) for v in vpc_ids})
            tables = self.observe(lambda: ec2.describe_route_tables(self.clients, vpc_ids))
            endpoints = self.observe(lambda: ec2.describe_vpc_endpoints(self.clients, vpc_ids))
        else:
            reason = "the cluster's subnets could not be described"
            vpcs, tables, endpoints = Observed.skip(reason), Observed.skip(reason), Observed.skip(reason)
        return NetworkObservation(
            security_groups=security_groups,
            missing_security_groups=tuple(missing),
            subnets=subnets,
            vpcs=vpcs,
            route_tables=tables,
            endpoints=endpoints,
            eni_count=self.observe(lambda: ec2.count_network_interfaces(self.clients)),
            eni_quota=self.observe(lambda: quotas.get_quota(self.clients, *quotas.ENI_QUOTA)),
        )

    def logs(self, cluster: Cluster, nodes: Observed[list[ClusterNode]], opts: CollectOptions) -> LogObservation:
        group = cluster.log_group
        exists = self.observe(lambda: logs.log_group_exists(self.clients, group))
        if not exists.available or not exists.value:
            reason = f"log group {group} does not exist" if exists.available else "the log group could not be looked up"
            return LogObservation(group, exists, Observed.skip(reason), Observed.skip(reason))
        start = opts.now - opts.log_window
        suspects = [
            (n.group, n.instance_id)
            for n in nodes.value or ()
            if n.status in SUSPECT_STATUSES or n.instance_id == opts.scope_node
        ]
        return LogObservation(
            group_name=group,
            group_exists=exists,
            lifecycle_events=self.observe(
                lambda: logs.lifecycle_events(self.clients, group, suspects, start, opts.now)
            ),
            hma_events=self.observe(lambda: logs.hma_events(self.clients, group, start, opts.now)),
        )

    def kubernetes(self, eks_cluster: Observed[EksCluster], opts: CollectOptions) -> Observed[KubernetesObservation]:
        """The EKS cluster's nodes, system pods, DaemonSets, namespaces and sandbox events, read with a
        token for the cluster named by the HyperPod cluster's Orchestrator (never a kube-context)."""
        if not eks_cluster.available or eks_cluster.value is None:
            return Observed.skip(eks_cluster.skipped or "the EKS cluster could not be described")
        cluster = eks_cluster.value

        def read() -> KubernetesObservation:
            token = self._token(cluster)
            observed = k8s.collect_kubernetes(cluster, token, now=opts.now)
            for part in (observed.nodes, observed.system_pods, observed.daemonsets, observed.namespaces):
                if part.failure is not None:
                    self.failures.append(part.failure)
            return observed

        return self.observe(read)

    def pods_on_nodes(self, eks_cluster: Observed[EksCluster], names: list[str]) -> dict[str, Observed[list[K8sPod]]]:
        """The pods on each named Kubernetes node (the blast radius of a node action), read like the rest."""
        if not eks_cluster.available or eks_cluster.value is None:
            why = eks_cluster.failure or ApiFailure(k8s.ACCESS_ACTION, "error", "the EKS cluster was not described")
            return {name: Observed.failed(why) for name in names}
        cluster = eks_cluster.value
        try:
            token = self._token(cluster)
        except ApiCallError as exc:
            return {name: Observed.failed(exc.failure) for name in names}
        return k8s.pods_on_nodes(cluster, token, names)

    def pytorchjob(self, eks_cluster: Observed[EksCluster], namespace: str, name: str) -> Observed[PyTorchJobRead]:
        """A PyTorchJob, its pods and their events (``hyperpod-debugger job --pytorchjob``), read like the rest."""
        from hyperpod_debugger.aws import k8s_jobs  # the job reader: loaded by the job diagnosis only

        if not eks_cluster.available or eks_cluster.value is None:
            why = eks_cluster.failure or ApiFailure(k8s.ACCESS_ACTION, "error", "the EKS cluster was not described")
            return Observed.failed(why)
        cluster = eks_cluster.value
        try:
            token = self._token(cluster)
        except ApiCallError as exc:
            return Observed.failed(exc.failure)
        return k8s_jobs.read_pytorchjob(cluster, token, namespace, name)

    def _token(self, cluster: EksCluster) -> str:
        """The EKS token for the cluster named by the HyperPod cluster's Orchestrator (never a kube-context)."""
        region = eks.parse_eks_arn(cluster.arn)[0]
        return k8s.eks_token(self.clients.client("sts", region), cluster.name, region)

    # ------------------------------------------------------------------ all

    def collect(self, cluster: Cluster, opts: CollectOptions) -> ClusterObservation:
        nodes = self.observe(lambda: sagemaker.list_cluster_nodes(self.clients, cluster))
        scope, eks_arn = opts.scope_node, cluster.eks_cluster_arn
        node_detail = (
            self.observe(lambda: sagemaker.describe_cluster_node(self.clients, cluster, scope)) if scope else None
        )
        if cluster.orchestrator == "EKS" and eks_arn:
            eks_cluster = self.observe(lambda: eks.describe_cluster(self.clients, eks_arn))
        else:
            eks_cluster = Observed.skip(f"orchestrator is {cluster.orchestrator}, not EKS")
        extra_sgs: list[str] = []
        if eks_cluster.available and eks_cluster.value:
            # The EKS control-plane SGs too: the B.5 check reads their ingress rules.
            extra_sgs.extend(eks_cluster.value.security_group_ids)
            if eks_cluster.value.cluster_security_group_id:
                extra_sgs.append(eks_cluster.value.cluster_security_group_id)
        types = [g.instance_type for g in cluster.instance_groups]
        kubernetes = self.kubernetes(eks_cluster, opts)
        return ClusterObservation(
            cluster=cluster,
            collected_at=opts.now,
            nodes=nodes,
            node_detail=node_detail,
            events=self.events(cluster, opts),
            network=self.network(cluster, extra_sgs),
            eks=eks_cluster,
            logs=self.logs(cluster, nodes, opts),
            instance_types=self.observe(lambda: ec2.describe_instance_types(self.clients, types)),
            offerings=self.observe(lambda: ec2.describe_offerings(self.clients, types)),
            cluster_tags=self.observe(lambda: sagemaker.list_tags(self.clients, cluster)),
            kubernetes=kubernetes,
            failures=self.failures,
        )
