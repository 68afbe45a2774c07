"""One stack composing the monitor's capabilities: findings store, notifications, sweep and detection."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from infra import constants as c
from infra.constructs.archive import FindingsArchive
from infra.constructs.detection import Detection, monitor_metric, route_unprocessed
from infra.constructs.findings import FindingsStore
from infra.constructs.hma_subscription import HmaSubscription
from infra.constructs.kubernetes_access import KubernetesReadAccess
from infra.constructs.notifications import Notifications, alarm
from infra.constructs.observability import Observability
from infra.constructs.python_function import PythonFunction
from infra.constructs.session_documents import SessionAccess
from infra.constructs.sweep import Sweep
from infra.settings import StackSettings


class HyperPodDebuggerStack(cdk.Stack):
    """Exposes `findings`, `notifications`, `sweep`, `detection`, `observability`, `hma_subscription`
    (None without `clusterLogGroups`) and `archive` (None without `historyArchive=true`), and their children,
    for tests."""

    def __init__(self, scope: Construct, construct_id: str, **kwargs) -> None:
        super().__init__(scope, construct_id, description="Read-only health monitor for SageMaker HyperPod", **kwargs)
        # every setting, read once from the context and checked (a bad one stops the synth, naming its key)
        self.settings = settings = StackSettings.from_context(self.node)
        self.layer = self._build_layer()

        self.findings = FindingsStore(self, "FindingsStore")
        self.notifications = Notifications(
            self,
            "Notifications",
            table=self.findings.table,
            idempotency_table=self.findings.idempotency_table,
            layer=self.layer,
            alert_emails=settings.alert_emails,
            slack_secret_name=settings.slack_secret_name or None,
            runbook_base_url=settings.runbook_base_url,
            event_bus=settings.findings_event_bus,
            policy=settings.alert_settings,
            log_retention=settings.log_retention,
        )
        self.sweep = Sweep(
            self,
            "Sweep",
            table=self.findings.table,
            idempotency_table=self.findings.idempotency_table,
            layer=self.layer,
            settings=settings.sweep_budget,
            interval=settings.sweep_interval,
            probe_period=settings.probe_period,
            cluster_allowlist=settings.cluster_allowlist,
            log_retention=settings.log_retention,
        )
        self.detection = Detection(
            self,
            "Detection",
            table=self.findings.table,
            idempotency_table=self.findings.idempotency_table,
            layer=self.layer,
            state_machine=self.sweep.state_machine,
            schedule_expression=settings.sweep_schedule,
            cluster_allowlist=settings.cluster_allowlist,
            log_retention=settings.log_retention,
            alarm_topic=self.notifications.topic,
            window_seconds=settings.event_window_seconds,
        )
        # the windows' probes come out of the same unreserved part of the account's rate as the sweep's
        self.detection.window_function.function.add_environment(
            "EVENT_WINDOW_PROBE_RATE", f"{self.sweep.settings.window_rate:g}"
        )
        self.hma_subscription = self._build_hma_subscription()
        self.observability = Observability(
            self,
            "Observability",
            topic=self.notifications.topic,
            state_machine=self.sweep.state_machine,
            interval=self.sweep.interval,
            probe_period=settings.probe_period,
            rules=[*self.detection.rules.values(), self.detection.schedule, self.notifications.daily_rule],
            sweep_log_group=self.sweep.function.log_group,
            unknown_share_percent=settings.unknown_share_alarm_percent,
            other_alarms=[
                *self.notifications.alarms.values(),
                *self.detection.alarms.values(),
                *(self.hma_subscription.alarms.values() if self.hma_subscription else ()),
            ],
            functions={f.node.id: f.function for f in self.functions},
            # the event handler's, the window's and the log subscription's errors have their own alarms
            errors_alarmed=[
                self.detection.function.function,
                self.detection.window_function.function,
                *([self.hma_subscription.function.function] if self.hma_subscription else []),
            ],
        )
        self.archive = self._build_archive()
        self.sessions = SessionAccess(self, "SessionAccess", mode=settings.session_documents)
        for function in self.probing_functions:
            self.sessions.grant(function)
        self.kubernetes_access = self._build_kubernetes_access()
        for function in self.triaging_functions:
            # how long HyperPod may repair a node before its incident is paged anyway
            function.function.add_environment("REPAIR_GRACE_S", str(settings.repair_grace_minutes * 60))
            # how long resolved findings, incidents and their history stay in the table (its TTL attribute)
            function.function.add_environment("FINDINGS_TTL_DAYS", str(settings.findings_ttl_days))
        self._build_outputs()
        self._add_security_checks()

    @property
    def functions(self) -> list[PythonFunction]:
        """Every function of the stack (each one's errors and throttles raise an alarm)."""
        found = [c for c in self.node.find_all() if isinstance(c, PythonFunction)]
        ids = [f.node.id for f in found]
        if len(set(ids)) != len(ids):
            raise ValueError(f"two functions share a construct id (their alarms would share a name): {sorted(ids)}")
        return found

    @property
    def triaging_functions(self) -> list:
        """Every function that runs a triage and so writes findings and brings the incidents up to date."""
        functions = [self.detection.function, *self.probing_functions]
        return functions + ([self.hma_subscription.function] if self.hma_subscription else [])

    @property
    def probing_functions(self) -> list:
        """Every function that opens Session Manager sessions (node probes, the Slurm controller)."""
        return [self.detection.window_function, self.sweep.function, self.sweep.probe_function]

    def _build_kubernetes_access(self) -> KubernetesReadAccess | None:
        """Read-only access entries on the listed EKS clusters for every function that runs a triage."""
        clusters = self.settings.eks_clusters
        if not clusters:
            return None
        readers = {"EventWindow": self.detection.window_function.role, "SweepCluster": self.sweep.function.role}
        return KubernetesReadAccess(self, "KubernetesReadAccess", eks_clusters=clusters, readers=readers)

    def _build_hma_subscription(self) -> HmaSubscription | None:
        """A subscription filter per listed cluster log group (at most 2 filters per group in CloudWatch Logs)."""
        log_groups = self.settings.log_groups
        if not log_groups:
            return None
        # Default: the literal term every HMA detection record carries, so only detections wake the
        # Lambda; the agent's other lines and the lifecycle-script streams of the same group are not
        # delivered (and not paid for). A pattern matches message text, not stream names.
        subscription = HmaSubscription(
            self,
            "HmaSubscription",
            log_groups=log_groups,
            filter_pattern=self.settings.hma_filter_pattern,
            table=self.findings.table,
            idempotency_table=self.findings.idempotency_table,
            layer=self.layer,
            cluster_allowlist=self.settings.cluster_allowlist,
            log_retention=self.settings.log_retention,
            window_queue=self.detection.window_queue,
            window_seconds=self.detection.window_seconds,
        )
        route_unprocessed(subscription.function, self.detection.dlq)
        topic = self.notifications.topic
        subscription.alarms = {
            "rejected": alarm(
                subscription,
                "LogPayloadsRejected",
                monitor_metric("LogPayloadsRejected"),
                "The log-subscription handler rejected a delivery it could not read (kept in the unprocessed queue)",
                topic,
            ),
            "errors": alarm(
                subscription,
                "LogSubscriptionErrors",
                subscription.function.function.metric_errors(period=cdk.Duration.minutes(5), statistic="Sum"),
                "The log-subscription handler failed; Lambda retries, then keeps the delivery in the unprocessed queue",
                topic,
            ),
        }
        return subscription

    def _build_archive(self) -> FindingsArchive | None:
        """The optional archive of finding events (S3, Parquet, Glue, Athena named queries)."""
        settings = self.settings
        if not settings.history_archive or settings.findings_event_bus is None:
            return None
        return FindingsArchive(
            self,
            "FindingsArchive",
            event_bus=settings.findings_event_bus,
            accounts=settings.history_archive_accounts or [self.account],
            expire_days=settings.history_archive_days,
            log_retention=settings.log_retention,
        )

    def _build_layer(self) -> lambda_.LayerVersion:
        """Dependencies + the core package, built offline by `make layer` into build/layer/python."""
        layer_dir = self.settings.layer_dir
        if not (layer_dir / "python").is_dir():
            raise FileNotFoundError(f"{layer_dir}/python is missing: run `make layer` first")
        return lambda_.LayerVersion(
            self,
            "CoreLayer",
            code=lambda_.Code.from_asset(str(layer_dir)),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
            compatible_architectures=[lambda_.Architecture.ARM_64],
            description="hyperpod_debugger core, Powertools and pinned AWS SDK",
        )

    def _build_outputs(self) -> None:
        for key, value in (
            (c.OUTPUT_FINDINGS_TABLE, self.findings.table.table_name),
            (c.OUTPUT_TOPIC, self.notifications.topic.topic_arn),
            (c.OUTPUT_STATE_MACHINE, self.sweep.state_machine.state_machine_arn),
        ):
            output = cdk.CfnOutput(self, key, value=value)
            output.override_logical_id(key)
        if self.notifications.chat_topic is not None:
            # what an Amazon Q Developer (chat applications) channel configuration subscribes to
            output = cdk.CfnOutput(self, c.OUTPUT_CHAT_TOPIC, value=self.notifications.chat_topic.topic_arn)
            output.override_logical_id(c.OUTPUT_CHAT_TOPIC)

    def _add_security_checks(self) -> None:
        cdk.Validations.of(self).add_plugins(AwsSolutionsChecks(self))
        for finding_id, reason in ACKNOWLEDGEMENTS.items():
            cdk.Validations.of(self).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions::{finding_id}", reason=reason))


# Each acknowledgement names one granular cdk-nag finding and says why it is accepted.
ACKNOWLEDGEMENTS: dict[str, str] = {
    "AwsSolutions-IAM5[Resource::*]": (
        "Only read actions that have no resource-level permissions or must span every cluster carry '*': "
        "sagemaker List/Describe on clusters the operator has not named in advance, ec2 Describe*, "
        "service-quotas:GetServiceQuota, logs reads across /aws/sagemaker/Clusters/* groups, "
        "ssmmessages:OpenDataChannel (no resource type), ssm:StartSession toward sagemaker-cluster: targets "
        "(AWS documents no resource ARN for them; a Deny limits the documents to the stack's pinned, "
        "fixed-command ones), X-Ray trace writes and the Step Functions log-delivery APIs (both documented as "
        "resource '*' only). No write action on HyperPod, EC2 or EKS."
    ),
    "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ssm:<AWS::Region>:<AWS::AccountId>:session/*]": (
        "ssm:TerminateSession on session ARNs of this account and Region, further limited by a condition to "
        "the sessions the function itself started (the aws:ssmmessages:session-id tag equals its aws:userid); "
        "session ids are not known before StartSession returns."
    ),
    "AwsSolutions-IAM5[Resource::<SweepSweepClusterFunctionD44345D0.Arn>:*]": (
        "Generated by the Step Functions LambdaInvoke task so the state machine can invoke versions and aliases "
        "of the sweep's cluster-step function; it grants lambda:InvokeFunction on that function only."
    ),
    "AwsSolutions-IAM5[Resource::<SweepProbeBatchFunctionD7926F6B.Arn>:*]": (
        "Generated by the Step Functions LambdaInvoke task so the state machine can invoke versions and aliases "
        "of the sweep's probe-batch function; it grants lambda:InvokeFunction on that function only."
    ),
    "AwsSolutions-SQS3": (
        "Both queues are dead-letter queues themselves (the EventBridge targets' DLQ and the stream event "
        "source's on-failure destination), a role cdk-nag cannot see because no SQS redrive policy points at "
        "them; a DLQ of a DLQ would only move the problem. The notifier DLQ's depth raises an alarm."
    ),
    "AwsSolutions-L1": (
        "Pinned to python3.12: the core layer is built offline for cp312/manylinux2014_aarch64 by `make layer`, "
        "and the runtime moves together with that build, not with each new Lambda runtime."
    ),
}
