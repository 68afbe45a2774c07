"""HMA subscription: a CloudWatch Logs subscription filter on each watched cluster's log group wakes a
Lambda with the Health Monitoring Agent's detection records.

Slurm-orchestrated clusters report most HMA detections only in their log group
(``/aws/sagemaker/Clusters/<cluster name>/<cluster id>``), not as EventBridge events, so the event rules of
:mod:`infra.constructs.detection` never see them. Limits to know before listing a group:

* CloudWatch Logs allows at most **two subscription filters per log group**; this construct takes one slot
  on every group it is given. A group whose two slots are already used (a log shipper, a SIEM feed) makes
  the deployment fail: free a slot or leave that group out (the sweep still reads its logs).
* A Lambda destination must be in the same account and Region as the log group, so each group must live
  where the stack is deployed.
* A filter pattern matches the message text only, never the stream name: the function itself drops
  records from streams other than ``SagemakerHealthMonitoringAgent/...`` (see ``functions/monitor/hma_logs``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_logs_destinations as destinations
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constants import CTX_CLUSTER_ALLOWLIST, CTX_CLUSTER_LOG_GROUPS, LOG_SUBSCRIPTION_HANDLER
from infra.constructs.detection import window_environment, window_statements
from infra.constructs.python_function import PythonFunction
from infra.constructs.sweep import triage_environment

#: ``/aws/sagemaker/Clusters/<name>/<id>``: botocore's ClusterName pattern and the 12-character cluster id.
CLUSTER_LOG_GROUP = re.compile(r"/aws/sagemaker/Clusters/(?P<name>[A-Za-z0-9](?:-*[A-Za-z0-9])*)/(?P<id>[a-z0-9]{12})")
MAX_FILTER_PATTERN = 1024  # AWS::Logs::SubscriptionFilter FilterPattern


@dataclass(frozen=True)
class ClusterLogGroup:
    log_group: str
    name: str
    cluster_id: str

    @property
    def key(self) -> str:
        """A construct id part, stable when the list is reordered (names and ids are [A-Za-z0-9-])."""
        return f"{self.name}-{self.cluster_id}"

    def allowed_by(self, allowlist: list[str]) -> bool:
        """As the functions' ``allows``: the cluster's name, its id, or an ARN ending with the id."""
        by_arn = f":cluster/{self.cluster_id}"
        return any(
            entry in (self.name, self.cluster_id) or (entry.startswith("arn:") and entry.endswith(by_arn))
            for entry in allowlist
        )


def cluster_log_groups(entries: list[str], allowlist: list[str]) -> list[ClusterLogGroup]:
    """The ``clusterLogGroups`` context, validated (duplicates dropped). Raises ``ValueError`` with the reason."""
    groups = []
    for entry in dict.fromkeys(entries):
        match = CLUSTER_LOG_GROUP.fullmatch(entry)
        if match is None or len(match.group("name")) > 63:
            raise ValueError(
                f"{CTX_CLUSTER_LOG_GROUPS} entry {entry!r} is not a HyperPod cluster log group: expected "
                "/aws/sagemaker/Clusters/<cluster name>/<12-character cluster id>"
            )
        group = ClusterLogGroup(entry, match.group("name"), match.group("id"))
        if allowlist and not group.allowed_by(allowlist):
            raise ValueError(
                f"{CTX_CLUSTER_LOG_GROUPS} entry {entry!r} is for cluster {group.name} ({group.cluster_id}), which "
                f"{CTX_CLUSTER_ALLOWLIST} does not list by name, id or ARN: its detections would only be skipped"
            )
        groups.append(group)
    return groups


class HmaSubscription(Construct):
    """Exposes `function` (the log-subscription PythonFunction), `filters` (log group name -> filter) and
    `alarms` (set by the stack, which owns the alert topic).

    Its own function rather than the event handler's: a Lambda has one handler entry point, and a
    separate function keeps its own role, log group, metrics and invoke permissions (scoped to the
    subscribed log groups) without touching the EventBridge path.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        log_groups: list[ClusterLogGroup],
        filter_pattern: str,
        table: dynamodb.ITableV2,
        idempotency_table: dynamodb.ITableV2,
        layer: lambda_.ILayerVersion,
        cluster_allowlist: list[str],
        log_retention: logs.RetentionDays,
        window_queue: sqs.IQueue,
        window_seconds: int,
    ) -> None:
        super().__init__(scope, construct_id)
        if not log_groups:
            raise ValueError("HmaSubscription needs at least one cluster log group")
        if not filter_pattern.strip() or len(filter_pattern) > MAX_FILTER_PATTERN:
            raise ValueError(f"the HMA filter pattern must be 1 to {MAX_FILTER_PATTERN} characters")
        # Each node's records join their cluster's event window: the window function triages them, so
        # this function reads nothing of the cluster (no HyperPod, EC2 or Session Manager permission).
        self.function = PythonFunction(
            self,
            "LogSubscriptionHandler",
            handler=LOG_SUBSCRIPTION_HANDLER,
            layer=layer,
            read_only=False,
            statements=window_statements(table, window_queue),
            timeout=cdk.Duration.minutes(1),
            log_retention=log_retention,
            environment={
                **triage_environment(table, idempotency_table, cluster_allowlist),
                **window_environment(window_queue, window_seconds),
            },
        )
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        destination = destinations.LambdaDestination(self.function.function)
        self.filters: dict[str, logs.SubscriptionFilter] = {}
        for group in log_groups:
            # The destination adds one lambda:InvokeFunction permission for logs.amazonaws.com per filter,
            # with this log group's ARN as its source, and makes the filter wait for it.
            self.filters[group.log_group] = logs.SubscriptionFilter(
                self,
                f"Filter-{group.key}",
                log_group=logs.LogGroup.from_log_group_name(self, f"LogGroup-{group.key}", group.log_group),
                destination=destination,
                filter_pattern=logs.FilterPattern.literal(filter_pattern),
            )
