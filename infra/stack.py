"""One stack composing the monitor's capabilities: findings store, notifications, sweep and detection."""

from __future__ import annotations

import json
import pathlib
import re

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from hyperpod_debugger.lifecycle.budget import SweepSettings
from infra import constants as c
from infra.constructs.detection import Detection, monitor_metric, route_unprocessed
from infra.constructs.findings import FindingsStore
from infra.constructs.hma_subscription import HmaSubscription, cluster_log_groups
from infra.constructs.kubernetes_access import KubernetesReadAccess
from infra.constructs.notifications import AlertSettings, Notifications, alarm
from infra.constructs.observability import Observability
from infra.constructs.session_documents import SessionAccess
from infra.constructs.sweep import Sweep


def _context_list(scope: Construct, key: str) -> list[str]:
    """A context value given as a list, a JSON list, or a comma-separated string (`-c key=a,b`)."""
    value = scope.node.try_get_context(key)
    if value in (None, ""):
        return []
    if isinstance(value, str):
        value = value.strip()
        if value.startswith("["):
            value = json.loads(value)
        else:
            value = value.split(",")
    return [str(v).strip() for v in value if str(v).strip()]


def _context_value(scope: Construct, key: str, default):
    value = scope.node.try_get_context(key)
    return default if value in (None, "") else value


def _context_number(scope: Construct, key: str, default: float) -> float:
    value = _context_value(scope, key, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number, got {value!r}") from None


_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")


def schedule_interval(expression: str) -> cdk.Duration:
    """The time between sweeps, from a ``rate(...)`` expression (the rotation needs it to plan coverage)."""
    match = _RATE.match(expression.strip())
    if not match:
        raise ValueError(
            f"{c.CTX_SCHEDULE} must be a rate expression such as 'rate(15 minutes)' (the probe rotation plans "
            f"from the interval), got {expression!r}"
        )
    count, unit = int(match.group(1)), match.group(2).rstrip("s")
    if count < 1:
        raise ValueError(f"{c.CTX_SCHEDULE} needs a positive interval, got {expression!r}")
    return {"minute": cdk.Duration.minutes, "hour": cdk.Duration.hours, "day": cdk.Duration.days}[unit](count)


_RETENTION = {
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
}


def _retention(days: int) -> logs.RetentionDays:
    if days not in _RETENTION:
        raise ValueError(f"{c.CTX_LOG_RETENTION_DAYS} must be one of {sorted(_RETENTION)}, got {days}")
    return _RETENTION[days]


_PRIORITIES = ("P0", "P1", "P2")
#: the daily-summary channel names people write, and the channels' own names
_CHANNEL_NAMES = {"email": "sns", "slack": "slack", "chat": "chatbot"}


def _priority(scope: Construct, key: str, default: str) -> str:
    value = str(_context_value(scope, key, default)).strip().upper()
    if value not in _PRIORITIES:
        raise ValueError(f"{key} must be P0, P1 or P2, got {value!r}")
    return value


def _bounded(scope: Construct, key: str, default: int, low: int, high: int) -> int:
    value = _context_number(scope, key, default)
    if value != int(value) or not low <= value <= high:
        raise ValueError(f"{key} must be a whole number from {low} to {high}, got {value:g}")
    return int(value)


def alert_settings(scope: Construct) -> AlertSettings:
    """The alert policy from context, each value checked (a bad one fails the synth, naming the key)."""
    everywhere = _priority(scope, c.CTX_ALERT_MIN_PRIORITY, c.DEFAULT_ALERT_MIN_PRIORITY)
    channels = [
        name.strip().lower()
        for name in str(_context_value(scope, c.CTX_DAILY_SUMMARY_CHANNELS, c.DEFAULT_DAILY_SUMMARY_CHANNELS)).split(
            ","
        )
        if name.strip() and name.strip().lower() != "none"
    ]
    unknown = [name for name in channels if name not in _CHANNEL_NAMES]
    if unknown:
        raise ValueError(
            f"{c.CTX_DAILY_SUMMARY_CHANNELS} names channels of {sorted(_CHANNEL_NAMES)} (or none), got {unknown}"
        )
    chat = str(_context_value(scope, c.CTX_CHAT_NOTIFICATIONS, "false")).strip().lower()
    if chat not in ("true", "false"):
        raise ValueError(f"{c.CTX_CHAT_NOTIFICATIONS} must be true or false, got {chat!r}")
    return AlertSettings(
        slack_min_priority=_priority(scope, c.CTX_SLACK_MIN_PRIORITY, everywhere),
        email_min_priority=_priority(scope, c.CTX_EMAIL_MIN_PRIORITY, everywhere),
        chat_min_priority=_priority(scope, c.CTX_CHAT_MIN_PRIORITY, everywhere),
        group_wait_s=_bounded(scope, c.CTX_ALERT_GROUP_WAIT_SECONDS, c.DEFAULT_ALERT_GROUP_WAIT_SECONDS, 0, 300),
        group_interval_s=_bounded(
            scope, c.CTX_ALERT_GROUP_INTERVAL_SECONDS, c.DEFAULT_ALERT_GROUP_INTERVAL_SECONDS, 10, 900
        ),
        daily_hour_utc=_bounded(scope, c.CTX_DAILY_SUMMARY_HOUR_UTC, c.DEFAULT_DAILY_SUMMARY_HOUR_UTC, 0, 23),
        daily_channels=tuple(_CHANNEL_NAMES[name] for name in channels),
        chat_topic=chat == "true",
    )


class HyperPodDebuggerStack(cdk.Stack):
    """Exposes `findings`, `notifications`, `sweep`, `detection`, `observability` and `hma_subscription`
    (None without `clusterLogGroups`), and their children, for tests."""

    def __init__(self, scope: Construct, construct_id: str, **kwargs) -> None:
        super().__init__(scope, construct_id, description="Read-only health monitor for SageMaker HyperPod", **kwargs)
        self.start_session_rate = int(_context_value(self, c.CTX_START_SESSION_RATE, c.DEFAULT_START_SESSION_RATE))
        if self.start_session_rate < 1:
            raise ValueError(f"{c.CTX_START_SESSION_RATE} must be >= 1, got {self.start_session_rate}")
        allowlist = _context_list(self, c.CTX_CLUSTER_ALLOWLIST)
        retention = _retention(int(_context_value(self, c.CTX_LOG_RETENTION_DAYS, c.DEFAULT_LOG_RETENTION_DAYS)))
        self.layer = self._build_layer()

        self.findings = FindingsStore(self, "FindingsStore")
        self.notifications = Notifications(
            self,
            "Notifications",
            table=self.findings.table,
            idempotency_table=self.findings.idempotency_table,
            layer=self.layer,
            alert_emails=_context_list(self, c.CTX_ALERT_EMAILS),
            slack_secret_name=str(_context_value(self, c.CTX_SLACK_SECRET_NAME, c.DEFAULT_SLACK_SECRET_NAME)).strip()
            or None,
            runbook_base_url=str(_context_value(self, c.CTX_RUNBOOK_BASE_URL, "")),
            event_bus=self._findings_event_bus(),
            policy=alert_settings(self),
        )
        schedule = str(_context_value(self, c.CTX_SCHEDULE, c.DEFAULT_SCHEDULE))
        period_hours = float(_context_value(self, c.CTX_PROBE_PERIOD_HOURS, c.DEFAULT_PROBE_PERIOD_HOURS))
        if period_hours <= 0:
            raise ValueError(f"{c.CTX_PROBE_PERIOD_HOURS} must be > 0, got {period_hours}")
        probe_period = cdk.Duration.minutes(round(period_hours * 60))
        self.sweep = Sweep(
            self,
            "Sweep",
            table=self.findings.table,
            idempotency_table=self.findings.idempotency_table,
            layer=self.layer,
            settings=SweepSettings(
                self.start_session_rate,
                int(_context_value(self, c.CTX_CLUSTER_CONCURRENCY, c.DEFAULT_CLUSTER_CONCURRENCY)),
                reserve_percent=_context_number(
                    self, c.CTX_START_SESSION_RESERVE_PERCENT, c.DEFAULT_START_SESSION_RESERVE_PERCENT
                ),
            ),
            interval=schedule_interval(schedule),
            probe_period=probe_period,
            cluster_allowlist=allowlist,
            log_retention=retention,
        )
        self.detection = Detection(
            self,
            "Detection",
            table=self.findings.table,
            idempotency_table=self.findings.idempotency_table,
            layer=self.layer,
            state_machine=self.sweep.state_machine,
            schedule_expression=schedule,
            cluster_allowlist=allowlist,
            log_retention=retention,
            alarm_topic=self.notifications.topic,
            window_seconds=int(_context_value(self, c.CTX_EVENT_WINDOW_SECONDS, c.DEFAULT_EVENT_WINDOW_SECONDS)),
        )
        # the windows' probes come out of the same unreserved part of the account's rate as the sweep's
        self.detection.window_function.function.add_environment(
            "EVENT_WINDOW_PROBE_RATE", f"{self.sweep.settings.window_rate:g}"
        )
        self.hma_subscription = self._build_hma_subscription(allowlist, retention)
        self.observability = Observability(
            self,
            "Observability",
            topic=self.notifications.topic,
            state_machine=self.sweep.state_machine,
            interval=self.sweep.interval,
            probe_period=probe_period,
            rules=[*self.detection.rules.values(), self.detection.schedule, self.notifications.daily_rule],
            sweep_log_group=self.sweep.function.log_group,
            unknown_share_percent=_context_number(
                self, c.CTX_UNKNOWN_SHARE_ALARM_PERCENT, c.DEFAULT_UNKNOWN_SHARE_ALARM_PERCENT
            ),
            other_alarms=[
                *self.notifications.alarms.values(),
                *self.detection.alarms.values(),
                *(self.hma_subscription.alarms.values() if self.hma_subscription else ()),
            ],
        )
        self.sessions = SessionAccess(
            self,
            "SessionAccess",
            mode=str(_context_value(self, c.CTX_SESSION_DOCUMENTS, "pinned")),  # type: ignore[arg-type]
        )
        for function in self.probing_functions:
            self.sessions.grant(function)
        self.kubernetes_access = self._build_kubernetes_access()
        grace = _bounded(self, c.CTX_REPAIR_GRACE_MINUTES, c.DEFAULT_REPAIR_GRACE_MINUTES, 5, 24 * 60)
        for function in self.triaging_functions:
            # how long HyperPod may repair a node before its incident is paged anyway
            function.function.add_environment("REPAIR_GRACE_S", str(grace * 60))
        self._build_outputs()
        self._add_security_checks()

    def _findings_event_bus(self) -> str | None:
        """The bus finding events go on (context ``findingsEventBus``; ``none`` puts none)."""
        bus = str(_context_value(self, c.CTX_FINDINGS_EVENT_BUS, c.DEFAULT_FINDINGS_EVENT_BUS)).strip()
        return None if bus.lower() == c.FINDINGS_EVENT_BUS_OFF else bus

    @property
    def triaging_functions(self) -> list:
        """Every function that runs a triage and so brings the incidents up to date."""
        functions = [self.detection.function, *self.probing_functions]
        return functions + ([self.hma_subscription.function] if self.hma_subscription else [])

    @property
    def probing_functions(self) -> list:
        """Every function that opens Session Manager sessions (node probes, the Slurm controller)."""
        return [self.detection.window_function, self.sweep.function, self.sweep.probe_function]

    def _build_kubernetes_access(self) -> KubernetesReadAccess | None:
        """Read-only access entries on the listed EKS clusters for every function that runs a triage."""
        clusters = _context_list(self, c.CTX_EKS_CLUSTERS)
        if not clusters:
            return None
        readers = {"EventWindow": self.detection.window_function.role, "SweepCluster": self.sweep.function.role}
        return KubernetesReadAccess(self, "KubernetesReadAccess", eks_clusters=clusters, readers=readers)

    def _build_hma_subscription(self, allowlist: list[str], retention: logs.RetentionDays) -> HmaSubscription | None:
        """A subscription filter per listed cluster log group (at most 2 filters per group in CloudWatch Logs)."""
        log_groups = cluster_log_groups(_context_list(self, c.CTX_CLUSTER_LOG_GROUPS), allowlist)
        if not log_groups:
            return None
        # Default: the literal term every HMA detection record carries, so only detections wake the
        # Lambda; the agent's other lines and the lifecycle-script streams of the same group are not
        # delivered (and not paid for). A pattern matches message text, not stream names.
        pattern = str(_context_value(self, c.CTX_HMA_FILTER_PATTERN, c.DEFAULT_HMA_FILTER_PATTERN))
        subscription = HmaSubscription(
            self,
            "HmaSubscription",
            log_groups=log_groups,
            filter_pattern=pattern,
            table=self.findings.table,
            idempotency_table=self.findings.idempotency_table,
            layer=self.layer,
            cluster_allowlist=allowlist,
            log_retention=retention,
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

    def _build_layer(self) -> lambda_.LayerVersion:
        """Dependencies + the core package, built offline by `make layer` into build/layer/python."""
        layer_dir = pathlib.Path(str(_context_value(self, c.CTX_LAYER_DIR, c.LAYER_DIR)))
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
        "(AWS documents no resource ARN for them; a Deny limits the documents to the stack's two pinned, "
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
