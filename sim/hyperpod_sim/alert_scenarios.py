"""What an on-call engineer receives, measured: fixed incidents run through the monitor's real handlers on a
simulated clock, with the stream's records handed over as the stack deploys them (ten per invocation,
shuffled), counting incidents, Slack messages and emails and the simulated seconds from event to first message.

The cluster is a *world* of faults. What HyperPod and the checks would report about it is built with the
project's own builders (``domain.checking.make_finding``, HyperPod's Node Health Event check, and the ladder, which
fills in the real drain / reboot / replace commands); the triage entry points of the handlers are pointed at
the world (the sweep's cluster step, its probe batches, and the event and window triages). Everything after
the triage is the deployed path: the findings store and its incidents on moto, the stream's batches to the
notifier, the alert groups' delayed queue, the outbox and the courier to a local Slack stand-in and to SNS.

    with alert_simulation() as sim:
        sim.world.faults.add(Fault("xid79", "i-…"))
        sim.node_health_event("i-…")
        sim.run(seconds=60)
        sim.slack_messages  # what Slack received, with the simulated time of each

Used by ``bench/alert_bench.py``, the integration tests and the demo.
"""

from __future__ import annotations

import contextlib
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.checks.health_event import health_event_findings
from hyperpod_debugger.domain import eventbridge
from hyperpod_debugger.domain.checking import make_finding
from hyperpod_debugger.domain.commands import aws_argv, mutating, read_only
from hyperpod_debugger.domain.model import (
    CheckCoverage,
    CheckStatus,
    ClusterRef,
    Coverage,
    Finding,
    Priority,
    Tag,
    TriageReport,
)
from hyperpod_debugger.domain.observations import (
    Cluster,
    ClusterNode,
    ClusterObservation,
    EventWindow,
    LogObservation,
    NetworkObservation,
    Observed,
)
from hyperpod_debugger.probe.fleet import NodeProbe, outcome_findings
from hyperpod_debugger.remediation import ladder
from hyperpod_debugger.remediation.verdict import node_verdicts
from hyperpod_debugger.triage import build_report
from hyperpod_sim.lambda_harness import MonitorHarness, SqsClock, map_items, monitor_harness
from hyperpod_sim.server import simulated_aws

REGION = "us-west-2"
ACCOUNT = "123456789012"
CLUSTER_NAME = "ml-train-prod"
CLUSTER_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/a1b2c3d4e5f6"
GROUP = "gpu-workers"
INSTANCE_TYPE = "ml.p5.48xlarge"
#: What the stream, an SQS delivery and a courier's post take, on the simulated clock (seconds): DynamoDB
#: Streams hands a write to Lambda within about a second; the rest is sub-second.
STREAM_LATENCY_S = 1

CLUSTER_CHECKS = (
    "network.efa_sg",
    "vpc.endpoints",
    "vpc.dns",
    "vpc.routing",
    "vpc.subnet_ips",
    "eks.prerequisites",
    "config.threads_per_core",
    "k8s.cni",
    "nodes.status",
    "logs.lifecycle",
    "cluster.events",
)
PROBE_CHECKS = ("probe.xid", "probe.gpu_count", "probe.ecc", "probe.row_remap", "probe.dcgm")


def node_ids(n: int, *, start: int = 0) -> list[str]:
    return [f"i-0{(start + k):016x}" for k in range(n)]


@dataclass(frozen=True)
class Fault:
    """One fault of the world: ``kind`` on ``node`` (None: the cluster)."""

    kind: str
    node: str | None = None


@dataclass
class World:
    """The simulated cluster: its nodes and what is wrong with them now."""

    nodes: list[str]
    faults: set[Fault] = field(default_factory=set)

    def _identity(self, node: str | None = None) -> dict[str, str | None]:
        return {
            "cluster_arn": CLUSTER_ARN,
            "cluster_name": CLUSTER_NAME,
            "instance_id": node,
            "instance_group": GROUP if node else None,
        }

    # --- what the checks would say --------------------------------------------------------------------

    def cluster_findings(self) -> list[Finding]:
        out: list[Finding] = []
        for fault in sorted(self.faults, key=lambda f: (f.kind, f.node or "")):
            out.extend(_CLUSTER_FAULTS.get(fault.kind, lambda w, f: [])(self, fault))
        return out

    def probe_findings(self, node: str) -> list[Finding]:
        if Fault("ssm_offline", node) in self.faults:
            # the probe's own verdict on a node whose SSM agent does not answer: UNKNOWN, nothing passed
            ref = ClusterNode(node, GROUP, INSTANCE_TYPE, "Running", "", None)
            probe = NodeProbe(
                ref,
                f"sagemaker-cluster:{CLUSTER_ARN.rsplit('/', 1)[-1]}_{GROUP}-{node}",
                "UNREACHABLE",
                "TargetNotConnected",
            )
            return outcome_findings([probe], cluster_arn=CLUSTER_ARN, cluster_name=CLUSTER_NAME, region=REGION)
        out: list[Finding] = []
        for fault in self.faults:
            if fault.node == node and fault.kind in _PROBE_FAULTS:
                out.extend(_PROBE_FAULTS[fault.kind](self, fault))
        failing = {f.check for f in out}
        out += [
            make_finding(self._identity(node), check, Tag.PASS, f"{check} passed on {node}", section="G.1")
            for check in PROBE_CHECKS
            if check not in failing
        ]
        return out

    # --- the observation the sweep plans from --------------------------------------------------------

    def cluster(self) -> Cluster:
        return Cluster(
            arn=CLUSTER_ARN,
            name=CLUSTER_NAME,
            cluster_id=CLUSTER_ARN.rsplit("/", 1)[-1],
            region=REGION,
            account_id=ACCOUNT,
            status="InService",
            failure_message=None,
            orchestrator="EKS",
            orchestrator_raw=None,
            eks_cluster_arn=f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{CLUSTER_NAME}",
            node_recovery="Automatic",
            provisioning_mode=None,
            vpc=None,
            instance_groups=(),
            creation_time=None,
        )

    def cluster_nodes(self, now: datetime) -> list[ClusterNode]:
        failed = {f.node for f in self.faults if f.kind == "lifecycle_s3"}
        return [
            ClusterNode(n, GROUP, INSTANCE_TYPE, "Failure" if n in failed else "Running", "", now - timedelta(days=3))
            for n in self.nodes
        ]

    def observation(self, now: datetime) -> ClusterObservation:
        skipped: Observed[Any] = Observed.skip("simulated")
        return ClusterObservation(
            cluster=self.cluster(),
            collected_at=now,
            nodes=Observed.ok(self.cluster_nodes(now)),
            node_detail=None,
            events=Observed.ok(EventWindow(now - timedelta(days=1), now, ())),
            network=NetworkObservation(skipped, (), skipped, skipped, skipped, skipped, skipped, skipped),
            eks=skipped,
            logs=LogObservation("/aws/sagemaker/Clusters/x", skipped, skipped, skipped),
            instance_types=skipped,
            offerings=skipped,
        )

    # --- the reports the handlers' triage entry points return ----------------------------------------

    def _report(
        self,
        now: datetime,
        findings: list[Finding],
        checks: list[str],
        probed: list[str] | None,
        *,
        scope: str | None = None,
        acting: dict[str, str] | None = None,
    ) -> TriageReport:
        nodes = {n.instance_id: n for n in self.cluster_nodes(now)}
        target = ladder.Target(CLUSTER_ARN, CLUSTER_NAME, REGION, "EKS", None)
        refined = ladder.apply(findings, target, nodes, recovering=acting or {})
        verdicts = node_verdicts(refined, nodes=nodes, recovering=acting or {})
        coverage = Coverage(
            checks=[CheckCoverage(check=c, status=CheckStatus.RAN) for c in checks],
            api_calls={"sagemaker:ListClusterNodes": 1 + len(self.nodes) // 100},
            probed_nodes=probed,
        )
        ref = ClusterRef(
            name=CLUSTER_NAME,
            arn=CLUSTER_ARN,
            cluster_id=CLUSTER_ARN.rsplit("/", 1)[-1],
            region=REGION,
            node_count=len(self.nodes),
        )
        return build_report(scope, now, ref, refined, coverage, verdicts=verdicts)

    def triage(self, request: Any) -> TriageReport:
        """What ``run_triage`` would return for an event's or a window's request."""
        now = request.now or datetime.now(UTC)
        named = [request.node] if request.node else list(request.nodes)
        findings = self.cluster_findings()
        checks = list(CLUSTER_CHECKS)
        probed: list[str] | None = None
        if request.probe and named:
            probed = named[: max(1, request.probe_options.max_nodes)]
            for node in probed:
                findings += self.probe_findings(node)
            checks += list(PROBE_CHECKS)
        acting: dict[str, str] = {}
        obs = self.observation(now)
        for report in request.health:
            findings += health_event_findings(obs, report)
            if report.hyperpod_acting:
                acting[report.instance_id] = f"HyperPod repair action {report.repair_action}"
        if request.health:
            checks.append("events.node_health")
        if request.node:
            findings = [f for f in findings if f.instance_id in (None, request.node)]
        return self._report(now, findings, checks, probed, scope=request.node, acting=acting)

    def sweep_triage(self, request: Any) -> tuple[TriageReport, ClusterObservation]:
        """What the sweep's cluster step reads: the cluster's checks, no node probes."""
        now = request.now or datetime.now(UTC)
        return self._report(now, self.cluster_findings(), list(CLUSTER_CHECKS), None), self.observation(now)

    def probe_batch(self, request: Any) -> TriageReport:
        """What one probe batch finds on its nodes."""
        now = request.now or datetime.now(UTC)
        probed = [n.instance_id for n in request.nodes]
        findings = [f for node in probed for f in self.probe_findings(node)]
        return self._report(now, findings, list(PROBE_CHECKS), probed)


# --------------------------------------------------------------------------- the faults


def _xid79(world: World, fault: Fault) -> list[Finding]:
    node = fault.node or ""
    ident = world._identity(node)
    line = f"[Mon Dec  1 03:12:44 2026] NVRM: Xid (PCI:0000:53:00): 79, pid=0, GPU has fallen off the bus. ({node})"
    return [
        make_finding(
            ident,
            "probe.xid",
            Tag.FAIL,
            "Xid 79 (GPU has fallen off the bus) on GPU 0000:53:00.0: the GPU is no longer reachable",
            priority=Priority.P0,
            section="G.1",
            evidence=[line],
            node_action="replace",
            next_step="Drain the node and replace it; a GPU off the bus does not come back with a reboot.",
        ),
        make_finding(
            ident,
            "probe.gpu_count",
            Tag.FAIL,
            "7 of 8 GPUs visible to nvidia-smi",
            priority=Priority.P0,
            section="G.1",
            evidence=["nvidia-smi -L lists 7 GPUs; the instance type has 8"],
        ),
    ]


def _three_gpu_faults(world: World, fault: Fault) -> list[Finding]:
    node = fault.node or ""
    ident = world._identity(node)
    return [
        make_finding(
            ident,
            "probe.ecc",
            Tag.FAIL,
            "Uncorrectable ECC errors on GPU 0000:53:00.0 (volatile DRAM uncorrectable 2)",
            priority=Priority.P0,
            section="G.1",
            evidence=["ECC Errors / Volatile / DRAM Uncorrectable : 2"],
            node_action="replace",
        ),
        make_finding(
            ident,
            "probe.row_remap",
            Tag.FAIL,
            "GPU 0000:53:00.0 has a row remapping pending: reset the GPU or reboot to apply it",
            priority=Priority.P1,
            section="G.1.a",
            evidence=["Remapped Rows / Pending : Yes"],
            node_action="reboot",
        ),
        make_finding(
            ident,
            "probe.dcgm",
            Tag.FAIL,
            "DCGM health check reports the GPU memory subsystem as failed on GPU 0",
            priority=Priority.P1,
            section="G.1.b",
            evidence=["Health Monitor Report: Memory: Fail"],
            node_action="investigate",
        ),
    ]


def _lifecycle_s3(world: World, fault: Fault) -> list[Finding]:
    node = fault.node or ""
    endpoint = "vpce-0a1b2c3d4e5f60718"
    tables = "rtb-0f1e2d3c4b5a69788"
    cluster = world._identity()
    on_node = world._identity(node)
    describe = read_only(aws_argv("ec2", "describe-vpc-endpoints", REGION, "--vpc-endpoint-ids", endpoint), "look")
    associate = mutating(
        aws_argv("ec2", "modify-vpc-endpoint", REGION, "--vpc-endpoint-id", endpoint, "--add-route-table-ids", tables),
        "associate the S3 gateway endpoint with the isolated subnets' route table",
        blast_radius=f"Every subnet that uses route table {tables} gains a route to Amazon S3 through {endpoint}.",
        changes_configuration=True,
        preconditions=["The route table belongs to the HyperPod subnets."],
        resource=endpoint,
    )
    return [
        make_finding(
            cluster,
            "vpc.endpoints",
            Tag.FAIL,
            f"S3 gateway endpoint {endpoint} is not associated with route table(s) {tables} of isolated HyperPod "
            "subnets",
            priority=Priority.P1,
            section="B.4",
            evidence=[f"{endpoint}: route tables none; subnets use {tables}"],
            suggested_commands=[describe, associate],
        ),
        make_finding(
            on_node,
            "logs.lifecycle",
            Tag.FAIL,
            f"Lifecycle script failed on {node}: the script could not reach Amazon S3 (connect timeout)",
            priority=Priority.P0,
            section="D",
            evidence=['fatal error: Could not connect to the endpoint URL: "https://s3.us-west-2.amazonaws.com/"'],
        ),
        make_finding(
            on_node,
            "nodes.status",
            Tag.FAIL,
            f"Node {node} ({GROUP}, {INSTANCE_TYPE}) is in Failure: lifecycle script failure",
            priority=Priority.P0,
            section="D",
            node_action="investigate",
        ),
        make_finding(
            on_node,
            "cluster.events",
            Tag.FAIL,
            f"1 Error event(s) for {node}: lifecycle script failure",
            priority=Priority.P1,
            section="D",
        ),
    ]


def _config(kind: str, check: str, message: str, priority: Priority, section: str) -> Any:
    def build(world: World, fault: Fault) -> list[Finding]:
        look = read_only(aws_argv("sagemaker", "describe-cluster", REGION, "--cluster-name", CLUSTER_NAME), "look")
        return [
            make_finding(
                world._identity(),
                check,
                Tag.FAIL if priority is not Priority.P2 else Tag.WARN,
                message,
                priority=priority,
                section=section,
                suggested_commands=[look],
            )
        ]

    return build


#: Eight configuration problems a first deployment may find (each a cluster-level root cause).
CONFIG_PROBLEMS = (
    (
        "efa_sg",
        "network.efa_sg",
        "Security group sg-0aa11bb22cc33dd44: no outbound all-traffic rule to itself; EFA health checks fail",
        Priority.P0,
        "A",
    ),  # noqa: E501
    (
        "routing",
        "vpc.routing",
        "Route table rtb-0123456789abcdef0 sends the default route of HyperPod subnets to an internet gateway",
        Priority.P0,
        "B.3",
    ),  # noqa: E501
    ("cni", "k8s.cni", "aws-node (VPC CNI) DaemonSet is unhealthy: 60/64 ready (CrashLoopBackOff)", Priority.P0, "O"),
    (
        "endpoints",
        "vpc.endpoints",
        "Isolated HyperPod subnets lack 3 required VPC endpoints: ecr.api, ecr.dkr, sts",
        Priority.P1,
        "B.4",
    ),  # noqa: E501
    ("dns", "vpc.dns", "enableDnsHostnames is disabled on vpc-0fedcba9876543210", Priority.P1, "B.2"),
    (
        "eks_sg",
        "eks.prerequisites",
        "EKS control-plane security group does not admit the HyperPod security group on TCP 443",
        Priority.P1,
        "B.5",
    ),  # noqa: E501
    (
        "ips",
        "vpc.subnet_ips",
        "Subnet subnet-0123456789abcdef0 (us-west-2c) has only 11 free IP addresses",
        Priority.P2,
        "B.1",
    ),  # noqa: E501
    (
        "threads",
        "config.threads_per_core",
        "Group gpu-workers runs ml.p5.48xlarge with 96 of 192 vCPUs (ThreadsPerCore=1)",
        Priority.P2,
        "J",
    ),  # noqa: E501
)

_PROBE_FAULTS = {"xid79": _xid79, "three_gpu_faults": _three_gpu_faults}
_CLUSTER_FAULTS: dict[str, Any] = {"lifecycle_s3": _lifecycle_s3}
for _kind, _check, _message, _priority, _section in CONFIG_PROBLEMS:
    _CLUSTER_FAULTS[_kind] = _config(_kind, _check, _message, _priority, _section)


# --------------------------------------------------------------------------- the simulation


@dataclass(frozen=True)
class Received:
    """One message a person received: when (simulated seconds since the start), on which channel, and it."""

    at: float
    channel: str
    payload: Any


@dataclass
class AlertSimulation:
    """The monitor's handlers on the simulated account and a simulated clock."""

    monitor: MonitorHarness
    sqs_clock: SqsClock
    world: World
    start: datetime
    shuffle: random.Random | None
    offset: float = 0.0
    received: list[Received] = field(default_factory=list)
    #: simulated seconds at which events were handed to the event function
    events_at: list[float] = field(default_factory=list)
    _slack_seen: int = 0
    _stream_due: float | None = None

    @property
    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.offset)

    def advance(self, seconds: float) -> None:
        self.offset += seconds
        self.sqs_clock.advance(seconds)

    # --- inputs ---------------------------------------------------------------------------------------

    def _envelope(self, detail_type: str, detail: dict[str, Any]) -> dict[str, Any]:
        return {
            "version": "0",
            "id": str(uuid.UUID(int=random.Random(f"{detail_type}{self.offset}{json.dumps(detail)}").getrandbits(128))),
            "detail-type": detail_type,
            "source": eventbridge.SOURCE,
            "account": ACCOUNT,
            "time": self.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": REGION,
            "resources": [CLUSTER_ARN],
            "detail": detail,
        }

    def node_health_event(self, node: str, *, repair_action: str = "None") -> Any:
        """HyperPod's Node Health Event for ``node`` (Unhealthy), handed to the event function now."""
        detail = {
            "ClusterName": CLUSTER_NAME,
            "ClusterArn": CLUSTER_ARN,
            "InstanceId": node,
            "HealthSummary": {
                "HealthStatus": "Unhealthy",
                "HealthStatusReason": "HMA detected fault type NvidiaErrorTerminate on the node",
                "RepairAction": repair_action,
            },
        }
        return self._event(self._envelope(eventbridge.NODE_HEALTH, detail))

    def cluster_event(self, node: str | None, description: str, *, level: str = "Error") -> Any:
        """A Cluster Event in the shape AWS publishes (fields under ``detail.EventDetails``)."""
        details = {
            "EventId": str(uuid.UUID(int=random.Random(f"{node}{description}{self.offset}").getrandbits(128))),
            "ClusterArn": CLUSTER_ARN,
            "ClusterName": CLUSTER_NAME,
            "InstanceGroupName": GROUP,
            "InstanceId": node,
            "ResourceType": "Instance" if node else "Cluster",
            "EventTime": int(self.now.timestamp() * 1000),
            "EventLevel": level,
            "Description": description,
        }
        return self._event(self._envelope(eventbridge.CLUSTER_EVENT, {"EventDetails": details}))

    def replace_node(self, old: str) -> str:
        """HyperPod replaced ``old`` with new hardware: a new instance id, and the old node's faults gone."""
        new = f"i-1{old[3:]}"
        self.world.nodes = [new if n == old else n for n in self.world.nodes]
        self.world.faults = {f for f in self.world.faults if f.node != old}
        return new

    def _event(self, envelope: dict[str, Any]) -> Any:
        from functions.monitor.handlers import events

        self.events_at.append(self.offset)
        response = self.monitor.invoke(events.handler, envelope, function_name="hyperpod-events")
        self._wrote()
        return response

    def sweep(self, *, probe: bool = True) -> dict[str, Any]:
        """One scheduled sweep as the state machine runs it: the cluster step now, then each probe batch at
        the time its round opens (the Map's Wait), the simulated clock moving with them (``probe`` False: the
        cluster step only, as if its probe batches had not run yet)."""
        from functions.monitor.handlers import probes, sweep
        from functions.shared.events import PROBE_ITEM_SELECTOR

        item = {"cluster_arn": CLUSTER_ARN, "cluster_name": CLUSTER_NAME, "sweep_id": f"sweep-{int(self.offset)}"}
        step = self.monitor.invoke(sweep.handler, item, function_name="hyperpod-sweep")
        self._wrote()
        batches = map_items(step, "$.batches", PROBE_ITEM_SELECTOR) if isinstance(step, dict) and probe else []
        for batch in batches:
            at = step["batches"][batch["batch"]].get("at")
            if at:
                due = (datetime.fromisoformat(str(at).replace("Z", "+00:00")) - self.start).total_seconds()
                self.run(until=due)
            self.monitor.invoke(probes.handler, batch, function_name="hyperpod-probes")
            self._wrote()
        return step

    # --- the deployed path after the triage -----------------------------------------------------------

    def _wrote(self) -> None:
        """The findings table was written: its stream hands the records over shortly."""
        if self._stream_due is None:
            self._stream_due = self.offset + STREAM_LATENCY_S

    def _step(self) -> bool:
        """Everything that is due now, once: the stream's batches, due windows, due alert groups, the
        outbox. True when anything ran."""
        from functions.monitor.handlers import alerts, outbox, stream, windows

        forget_dynamodb_copies()
        ran = False
        if self._stream_due is not None and self.offset >= self._stream_due:
            self._stream_due = None
            ran |= bool(self.monitor.notify_stream(stream.handler, shuffle=self.shuffle))
        if self.monitor.run_windows(windows.handler):
            ran = True
            self._wrote()
        ran |= bool(self.monitor.run_alert_groups(alerts.handler))
        before = len(self.monitor.sink.received)
        ran |= bool(self.monitor.deliver_outbox(outbox.handler))
        for payload in self.monitor.sink.received[before:]:
            self.received.append(Received(self.offset, "slack", payload))
        for email in self.monitor.emails():
            self.received.append(Received(self.offset, "email", email))
        return ran

    def run(self, *, seconds: float | None = None, until: float | None = None, step: float = 1.0) -> None:
        """Let simulated time pass, running whatever falls due (in steps of ``step`` seconds)."""
        end = until if until is not None else self.offset + (seconds or 0.0)
        while True:
            while self._step():
                pass
            if self.offset >= end:
                return
            self.advance(min(step, end - self.offset))

    # --- what people received --------------------------------------------------------------------------

    def messages(self, channel: str) -> list[Received]:
        return [r for r in self.received if r.channel == channel]

    def incidents(self) -> list[Any]:
        from hyperpod_debugger.store.incidents import IncidentStore

        return list(
            IncidentStore(self.monitor.clients, self.monitor.resources.findings_table).incidents(CLUSTER_ARN).values()
        )

    def first_message_after_event(self) -> float | None:
        """Simulated seconds from the first event to the first message on any channel."""
        if not self.events_at or not self.received:
            return None
        first = min(r.at for r in self.received if r.at >= self.events_at[0])
        return first - self.events_at[0]


class _Untracked(list[Any]):
    """A model's ``instances_tracked`` that keeps nothing (moto appends every instance it creates)."""

    def append(self, instance: Any, /) -> None:
        return None


def forget_dynamodb_copies() -> None:
    """Stop moto's model tracker keeping every model instance it ever created (for its dashboard, which the
    simulation never reads): DynamoDB's ``TransactWriteItems`` deep-copies the whole table, stream shard
    included, once per write of the transaction, and each copied item and stream record was kept, so one
    window's triage on a 2,000-node cluster held hundreds of table copies (gigabytes) until it returned.

    Every model's list is emptied and replaced by one that keeps nothing (idempotent; a model moto loads later
    is caught by the next call). S3's models are left alone: its reset walks its tracked keys to close their
    files. moto's reset (the end of :func:`~hyperpod_sim.server.simulated_aws`) puts ordinary lists back.
    Nothing of the tables or queues themselves is dropped."""
    from moto.core.model_instances import model_data

    for service, models in model_data.items():
        if service == "s3":
            continue
        for model in models.values():
            if not isinstance(getattr(model, "instances_tracked", None), _Untracked):
                model.instances_tracked = _Untracked()  # type: ignore[attr-defined]


@contextlib.contextmanager
def transactions_copy_touched_items() -> Iterator[None]:
    """moto's ``TransactWriteItems`` with the rollback it promises, without its cost: moto deep-copies every table
    a transaction writes, once per write, before the first write (to put the copy in the table's place if the
    transaction is cancelled). On a findings table of a 2,000-node cluster that is about 0.1 s per copy, and a
    window's triage of a storm writes hundreds of transactions, each a copy larger than the last.

    For the block, a transaction copies only the items its writes name (and notes where each table's stream
    shard ends); the table copies moto's code asks for are the tables themselves. Where moto would put its copy
    back (a cancelled transaction, a validation error in the middle of one), those items are put back as they
    were (absent ones removed) and the stream records the transaction added are dropped: the same table, and
    the same answer to the caller. Where moto keeps partial writes (two operations in one element, refused
    before its rollback is armed), so does this."""
    import copy
    import threading
    import types

    from moto.dynamodb import models as ddb_models
    from moto.dynamodb.exceptions import (
        MockValidationException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    original = ddb_models.DynamoDBBackend.transact_write_items
    module_copy = ddb_models.copy
    inside = threading.local()

    def deepcopy(value: Any, memo: Any = None) -> Any:
        if getattr(inside, "on", False) and isinstance(value, Table):
            return value  # the transaction keeps its own copies of what it touches (below)
        return copy.deepcopy(value, memo)

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        items: dict[tuple[str, Any, Any], tuple[bool, Any]] = {}
        shards: dict[str, tuple[Any, int]] = {}
        for element in transact_items if isinstance(transact_items, list) else []:
            for kind, op in element.items():
                table = self.tables.get(op.get("TableName")) if isinstance(op, dict) else None
                if table is None:
                    continue
                if table.stream_shard is not None:
                    shards.setdefault(op["TableName"], (table.stream_shard, len(table.stream_shard.items)))
                attrs = op.get("Item") if kind == "Put" else op.get("Key")
                try:
                    hash_value = DynamoType(attrs[table.hash_key_attr])
                    range_value = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None
                except (KeyError, TypeError):
                    continue  # refused by moto before it writes anything
                had = hash_value in table.items
                current = table.items.get(hash_value) if had else None
                if range_value is not None:
                    current = current.get(range_value) if isinstance(current, dict) else None
                items.setdefault((op["TableName"], hash_value, range_value), (had, copy.deepcopy(current)))

        def put_back() -> None:
            for (name, hash_value, range_value), (had, before) in items.items():
                table = self.tables[name]
                if range_value is None:
                    if before is None:
                        table.items.pop(hash_value, None)
                    else:
                        table.items[hash_value] = before
                    continue
                if before is not None:
                    table.items[hash_value][range_value] = before
                    continue
                bucket = table.items.get(hash_value)
                if bucket is not None:
                    bucket.pop(range_value, None)
                    if not bucket and not had:
                        table.items.pop(hash_value, None)
            for shard, length in shards.values():
                del shard.items[length:]

        inside.on = True
        try:
            original(self, transact_items)
        except TransactWriteSingleOpException:
            raise  # moto keeps the earlier operations' writes here
        except (TransactionCanceledException, MockValidationException):
            put_back()
            raise
        finally:
            inside.on = False

    ddb_models.copy = types.SimpleNamespace(deepcopy=deepcopy)  # type: ignore[assignment]
    ddb_models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    try:
        yield
    finally:
        ddb_models.DynamoDBBackend.transact_write_items = original  # type: ignore[method-assign]
        ddb_models.copy = module_copy


#: Powertools lines the simulation keeps (the latest): enough to look at a failure, not the whole storm.
KEEP_OUTPUT_LINES = 2000


@contextlib.contextmanager
def alert_simulation(
    world: World,
    *,
    seed: int | None = 7,
    env: dict[str, str | None] | None = None,
    coalesce: bool = True,
    table_copies: bool = False,
) -> Iterator[AlertSimulation]:
    """The monitor on a simulated account and clock, its triage entry points pointed at ``world``.

    ``table_copies``: moto's own ``TransactWriteItems``, which deep-copies every table it writes once per write
    (by default a transaction copies only the items it touches: :func:`transactions_copy_touched_items`)."""
    from functions.monitor import runtime, signal_run
    from functions.monitor.handlers import probes, sweep

    settings: dict[str, str | None] = {
        "PROBE_ENABLED": "true",
        "START_SESSION_RATE": "20",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        **(env or {}),
    }
    with simulated_aws(), contextlib.ExitStack() as stack:
        if not table_copies:
            stack.enter_context(transactions_copy_touched_items())
        clients = AwsClients(REGION, max_attempts=2)
        monitor = stack.enter_context(monitor_harness(clients, env=settings, coalesce=coalesce))
        clock = stack.enter_context(SqsClock(frozen=True))
        start = datetime.fromtimestamp(clock.now(), UTC).replace(microsecond=0)
        # what only grows otherwise: the stream's records once handed over, the captured Powertools output
        monitor.stream.trim = True
        monitor.output.keep = KEEP_OUTPUT_LINES
        forget_dynamodb_copies()
        sim = AlertSimulation(monitor, clock, world, start, random.Random(seed) if seed is not None else None)
        stack.enter_context(runtime.use_clock(lambda: sim.now))
        patch = stack.enter_context(_patched())
        patch(signal_run, "run_triage", lambda request, _clients=None: world.triage(request))
        patch(sweep, "triage_with_observation", lambda request, _clients=None: world.sweep_triage(request))
        patch(probes, "run_probe_batch", lambda request, _clients=None: world.probe_batch(request))
        yield sim


@contextlib.contextmanager
def _patched() -> Iterator[Any]:
    saved: list[tuple[Any, str, Any]] = []

    def patch(module: Any, name: str, value: Any) -> None:
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    try:
        yield patch
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


__all__ = [
    "CLUSTER_ARN",
    "CLUSTER_NAME",
    "CONFIG_PROBLEMS",
    "AlertSimulation",
    "Fault",
    "Received",
    "World",
    "alert_simulation",
    "node_ids",
]
