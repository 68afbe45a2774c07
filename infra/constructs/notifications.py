"""Alerts: a KMS-encrypted SNS topic with email subscriptions, the Slack webhook secret, the stream
notifier, the outbox and its courier.

    findings stream ─▶ stream_notifier ─▶ outbox (SQS FIFO) ─▶ courier ─▶ Slack, SNS email
                           │                    │
                           └▶ notifier DLQ      └▶ outbox DLQ (the rendered message itself)

The notifier renders each transition and queues one message per channel in the outbox, grouped by
channel and cluster so a message that waits holds back the later ones of its cluster. The courier
makes one attempt per message per invocation; a failure waits for a backoff in the queue, for about
48 hours, before the message moves, whole, to the outbox's dead-letter queue: a day-long Slack
outage delays alerts and loses none. Each queue's depth, an alert waiting in the outbox for more than
an hour, and stream records reaching the notifier more than five minutes late raise an alarm on the same
topic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from hyperpod_debugger.notify import finding_event
from infra.constants import (
    ALERT_GROUP_PARTITION,
    ALERT_GROUP_TIMEOUT_S,
    ALERT_GROUPS_HANDLER,
    COURIER_HANDLER,
    COURIER_MAX_CONCURRENCY,
    COURIER_TIMEOUT_S,
    OUTBOX_BATCH_SIZE,
    OUTBOX_MAX_AGE_S,
    OUTBOX_MAX_RECEIVES,
    OUTBOX_RETENTION_DAYS,
    OUTBOX_VISIBILITY_S,
    STREAM_BATCH_SIZE,
    STREAM_MAX_ITERATOR_AGE_S,
    STREAM_NOTIFIER_HANDLER,
    STREAM_RETRY_ATTEMPTS,
)
from infra.constructs.python_function import PythonFunction

#: What PutEvents takes as EventBusName for a bus it may put on (no partner buses): a name or a bus ARN.
_EVENT_BUS = re.compile(r"(arn:aws[\w-]*:events:[a-z]+-[a-z]+-[\w-]+:[0-9]{12}:event-bus/)?[.\-_A-Za-z0-9]{1,256}")


def validate_event_bus(bus: str) -> str:
    """``bus`` when PutEvents takes it as EventBusName; otherwise ``ValueError`` naming the setting."""
    if not _EVENT_BUS.fullmatch(bus) or len(bus) > 1600:
        raise ValueError(
            f"findingsEventBus must be 'default', an event bus name or an event bus ARN "
            f"(arn:<partition>:events:<region>:<account>:event-bus/<name>), or 'none'; got {bus!r}"
        )
    return bus


def event_bus_arn(scope: Construct, bus: str) -> str:
    """The ARN of the finding events' bus, given as a name (this account and Region) or as an ARN."""
    validate_event_bus(bus)
    if bus.startswith("arn:"):
        return bus
    return cdk.Stack.of(scope).format_arn(service="events", resource="event-bus", resource_name=bus)


@dataclass(frozen=True)
class AlertSettings:
    """The alert policy's stack settings (``infra.settings.StackSettings.alert_settings``)."""

    slack_min_priority: str = "P1"
    email_min_priority: str = "P1"
    chat_min_priority: str = "P1"
    group_wait_s: int = 10
    group_interval_s: int = 300
    daily_hour_utc: int = 9
    daily_channels: tuple[str, ...] = ("sns", "slack", "chatbot")
    #: create the Amazon Q Developer (chat applications) topic
    chat_topic: bool = False


def encrypted_dlq(scope: Construct, construct_id: str, *, fifo: bool = False) -> sqs.Queue:
    """An SQS dead-letter queue: SSE, TLS-only, 14 days of retention."""
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=cdk.Duration.days(14),
        fifo=fifo or None,
    )


def alarm(
    scope: Construct,
    construct_id: str,
    metric: cloudwatch.IMetric,
    description: str,
    topic: sns.ITopic,
    *,
    threshold: float = 0,
) -> cloudwatch.Alarm:
    """An alarm when ``metric`` is above ``threshold`` in a period (no data: not breaching), sent to ``topic``."""
    created = cloudwatch.Alarm(
        scope,
        construct_id,
        alarm_description=description,
        metric=metric,
        threshold=threshold,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods=1,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    created.add_alarm_action(cw_actions.SnsAction(topic))
    return created


class Notifications(Construct):
    """Exposes `key`, `topic`, `slack_secret`, `dlq` (the stream's), `dlq_alarm`, `notifier`, `outbox`,
    `outbox_dlq`, `courier` (PythonFunctions), `event_bus_arn` (None when no finding events are put) and
    `alarms`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITableV2,
        idempotency_table: dynamodb.ITableV2,
        layer: lambda_.ILayerVersion,
        alert_emails: Sequence[str],
        slack_secret_name: str | None,
        runbook_base_url: str = "",
        event_bus: str | None = None,
        policy: AlertSettings | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
    ) -> None:
        super().__init__(scope, construct_id)
        self.policy = policy or AlertSettings()
        self.log_retention = log_retention
        self.event_bus = event_bus
        self.event_bus_arn = event_bus_arn(self, event_bus) if event_bus else None
        self.key = self._build_key()
        self.topic = self._build_topic(alert_emails)
        # Slack is a channel only when its webhook secret is named: no secret, no Slack messages, no retries
        self.slack_secret = (
            secretsmanager.Secret.from_secret_name_v2(self, "SlackWebhook", slack_secret_name)
            if slack_secret_name
            else None
        )
        self.chat_topic = self._build_chat_topic() if self.policy.chat_topic else None
        self.dlq = encrypted_dlq(self, "NotifierDlq")
        self.alert_group_dlq = encrypted_dlq(self, "AlertGroupDlq")
        self.alert_group_queue = sqs.Queue(
            self,
            "AlertGroupQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=cdk.Duration.seconds(6 * ALERT_GROUP_TIMEOUT_S),
            retention_period=cdk.Duration.days(1),
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=10, queue=self.alert_group_dlq),
        )
        self.outbox_dlq = encrypted_dlq(self, "OutboxDlq", fifo=True)
        self.outbox = sqs.Queue(
            self,
            "Outbox",
            fifo=True,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=cdk.Duration.seconds(OUTBOX_VISIBILITY_S),
            retention_period=cdk.Duration.days(OUTBOX_RETENTION_DAYS),
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=OUTBOX_MAX_RECEIVES, queue=self.outbox_dlq),
        )
        self.notifier = self._build_notifier(table, idempotency_table, layer, runbook_base_url)
        self.alert_groups = self._build_alert_groups(table, idempotency_table, layer, runbook_base_url)
        self.courier = self._build_courier(idempotency_table, layer)
        self.dlq_alarm = self._build_dlq_alarm()
        self.alarms = {
            "notifier_dlq": self.dlq_alarm,
            "alert_group_dlq": alarm(
                self,
                "AlertGroupDlqDepth",
                self.alert_group_dlq.metric_approximate_number_of_messages_visible(period=cdk.Duration.minutes(5)),
                "A cluster's alert group could not be flushed ten times: its incidents wait untold (the message "
                "in the alert-group DLQ names the cluster)",
                self.topic,
            ),
            "outbox_dlq": alarm(
                self,
                "OutboxDlqDepth",
                self.outbox_dlq.metric_approximate_number_of_messages_visible(period=cdk.Duration.minutes(5)),
                "Alerts that could not be delivered are in the outbox dead-letter queue (each message holds the "
                "rendered alert; its 'reason' attribute says why)",
                self.topic,
            ),
            "outbox_age": alarm(
                self,
                "OutboxAlertsWaiting",
                self.outbox.metric_approximate_age_of_oldest_message(
                    period=cdk.Duration.minutes(5), statistic="Maximum"
                ),
                "An alert has waited more than an hour in the outbox: Slack or email is failing",
                self.topic,
                threshold=OUTBOX_MAX_AGE_S,
            ),
            "stream_late": alarm(
                self,
                "NotifierIteratorAge",
                # milliseconds; Lambda reports it for each batch it hands over, none while the stream is quiet
                self.notifier.function.metric("IteratorAge", period=cdk.Duration.minutes(5), statistic="Maximum"),
                f"The stream notifier is reading findings-table changes more than {STREAM_MAX_ITERATOR_AGE_S // 60} "
                "minutes after they were written: it is stuck retrying a batch, so new incidents are told late",
                self.topic,
                threshold=STREAM_MAX_ITERATOR_AGE_S * 1000,
            ),
        }

    def _build_key(self) -> kms.Key:
        key = kms.Key(
            self,
            "TopicKey",
            description="Encrypts the HyperPod debugger alert topic",
            enable_key_rotation=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        # CloudWatch alarms publish to the encrypted topic, so the service needs the data key.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],
            )
        )
        return key

    def _build_topic(self, alert_emails: Sequence[str]) -> sns.Topic:
        topic = sns.Topic(
            self,
            "AlertTopic",
            display_name="HyperPod node debugger alerts",
            master_key=self.key,
            enforce_ssl=True,
        )
        for email in alert_emails:
            topic.add_subscription(subscriptions.EmailSubscription(email))
        return topic

    def _build_notifier(
        self,
        table: dynamodb.ITableV2,
        idempotency_table: dynamodb.ITableV2,
        layer: lambda_.ILayerVersion,
        runbook_base_url: str,
    ) -> PythonFunction:
        notifier = PythonFunction(
            self,
            "StreamNotifier",
            log_retention=self.log_retention,
            handler=STREAM_NOTIFIER_HANDLER,
            layer=layer,
            read_only=False,  # renders and queues only; it never calls HyperPod, EC2 or SSM
            timeout=cdk.Duration.minutes(2),
            memory_size=256,
            environment={
                "IDEMPOTENCY_TABLE": idempotency_table.table_name,
                "RUNBOOK_BASE_URL": runbook_base_url,
                "OUTBOX_QUEUE_URL": self.outbox.queue_url,
                "UNPROCESSED_QUEUE_URL": self.dlq.queue_url,
                "FINDINGS_TABLE": table.table_name,
                "ALERT_GROUP_QUEUE_URL": self.alert_group_queue.queue_url,
                **self._group_timing(),
                **self._event_bus_environment(),
            },
            statements=[
                iam.PolicyStatement(sid="QueueAlerts", actions=["sqs:SendMessage"], resources=[self.outbox.queue_arn]),
                iam.PolicyStatement(
                    # arming a cluster's alert group: its item in the findings table (the alert groups' partition
                    # only), its delayed flush message
                    sid="ArmAlertGroups",
                    actions=["dynamodb:GetItem", "dynamodb:UpdateItem"],
                    resources=[table.table_arn],
                    conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [ALERT_GROUP_PARTITION]}},
                ),
                iam.PolicyStatement(
                    sid="ScheduleAlertGroupFlush",
                    actions=["sqs:SendMessage"],
                    resources=[self.alert_group_queue.queue_arn],
                ),
                iam.PolicyStatement(
                    # stream records that cannot be read are kept, with the reason, in the stream's DLQ
                    sid="KeepUnreadableRecords",
                    actions=["sqs:SendMessage"],
                    resources=[self.dlq.queue_arn],
                ),
                iam.PolicyStatement(
                    # the delivery ledger: which messages were already queued
                    sid="DeliveryLedger",
                    actions=["dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"],
                    resources=[idempotency_table.table_arn],
                ),
            ],
        )
        notifier.function.add_event_source(
            event_sources.DynamoEventSource(
                table,
                starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                batch_size=STREAM_BATCH_SIZE,
                bisect_batch_on_error=True,
                retry_attempts=STREAM_RETRY_ATTEMPTS,
                report_batch_item_failures=True,
                max_record_age=cdk.Duration.days(1),
                on_failure=event_sources.SqsDlq(self.dlq),
                # Only finding items (their events) and incident items (their alert groups) carry a transition;
                # history, sweep, probe-rotation, window and alert-group records (and TTL deletions, which
                # have no new image) never wake the notifier.
                filters=[
                    lambda_.FilterCriteria.filter(
                        {"dynamodb": {"NewImage": {"item_type": {"S": ["FINDING", "INCIDENT"]}}}}
                    )
                ],
            )
        )
        return notifier

    def _build_courier(self, idempotency_table: dynamodb.ITableV2, layer: lambda_.ILayerVersion) -> PythonFunction:
        slack: list[iam.PolicyStatement] = []
        if self.slack_secret is not None:
            slack = [
                iam.PolicyStatement(
                    sid="SlackWebhookSecret",
                    actions=["secretsmanager:GetSecretValue"],
                    # from_secret_name_v2 has no random suffix; match the six characters Secrets Manager adds.
                    resources=[f"{self.slack_secret.secret_arn}-??????"],
                ),
                iam.PolicyStatement(
                    # every courier's Slack pace: one conditional UpdateItem per slot on the webhook's lane
                    # item (a lost condition hands the item back, so no read is needed), lane items only
                    sid="SlackPace",
                    actions=["dynamodb:UpdateItem"],
                    resources=[idempotency_table.table_arn],
                    conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["pace#*"]}},
                ),
            ]
        courier = PythonFunction(
            self,
            "Courier",
            log_retention=self.log_retention,
            handler=COURIER_HANDLER,
            layer=layer,
            read_only=False,  # delivers only; it never calls HyperPod, EC2 or SSM
            timeout=cdk.Duration.seconds(COURIER_TIMEOUT_S),
            memory_size=256,
            environment={
                "IDEMPOTENCY_TABLE": idempotency_table.table_name,
                **self._channel_environment(),
                "OUTBOX_QUEUE_URL": self.outbox.queue_url,
                "OUTBOX_DLQ_URL": self.outbox_dlq.queue_url,
                "SLACK_TIMEOUT_S": "5",
                **self._event_bus_environment(),
            },
            statements=[
                iam.PolicyStatement(
                    sid="PublishAlerts",
                    actions=["sns:Publish"],
                    resources=[self.topic.topic_arn, *([self.chat_topic.topic_arn] if self.chat_topic else [])],
                ),
                iam.PolicyStatement(
                    sid="AlertTopicKey",
                    actions=["kms:Decrypt", "kms:GenerateDataKey"],
                    resources=[self.key.key_arn],
                ),
                iam.PolicyStatement(
                    # the delivery ledger: which messages were already sent
                    sid="DeliveryLedger",
                    actions=["dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"],
                    resources=[idempotency_table.table_arn],
                ),
                *slack,
                iam.PolicyStatement(
                    # a failed message waits for its backoff in the queue
                    sid="OutboxBackoff",
                    actions=["sqs:ChangeMessageVisibility"],
                    resources=[self.outbox.queue_arn],
                ),
                iam.PolicyStatement(
                    # a message its channel refuses as such goes to the dead-letter queue at once
                    sid="OutboxDeadLetters",
                    actions=["sqs:SendMessage"],
                    resources=[self.outbox_dlq.queue_arn],
                ),
                *self._event_bus_statements(),
            ],
        )
        # Slack takes about one message a second per webhook, paced across couriers by the shared lanes: more
        # couriers than COURIER_MAX_CONCURRENCY would only wait for the lane (the messages wait in the outbox)
        courier.function.add_event_source(
            event_sources.SqsEventSource(
                self.outbox,
                batch_size=OUTBOX_BATCH_SIZE,
                report_batch_item_failures=True,
                max_concurrency=COURIER_MAX_CONCURRENCY,
            )
        )
        return courier

    def _build_chat_topic(self) -> sns.Topic:
        """The topic an Amazon Q Developer in chat applications channel configuration subscribes to: it carries
        the incidents in Amazon Q Developer's custom-notification format (Slack, Microsoft Teams, Chime)."""
        return sns.Topic(
            self,
            "ChatTopic",
            display_name="HyperPod node debugger incidents for Amazon Q Developer in chat applications",
            master_key=self.key,
            enforce_ssl=True,
        )

    def _channel_environment(self) -> dict[str, str]:
        """The channels people are told on: email always, Slack and chat only when configured."""
        env = {"ALERT_TOPIC_ARN": self.topic.topic_arn}
        if self.slack_secret is not None:
            env["SLACK_SECRET_NAME"] = self.slack_secret.secret_name
        if self.chat_topic is not None:
            env["CHATBOT_TOPIC_ARN"] = self.chat_topic.topic_arn
        return env

    def _group_timing(self) -> dict[str, str]:
        return {
            "ALERT_GROUP_WAIT_S": str(self.policy.group_wait_s),
            "ALERT_GROUP_INTERVAL_S": str(self.policy.group_interval_s),
        }

    def _build_alert_groups(
        self,
        table: dynamodb.ITableV2,
        idempotency_table: dynamodb.ITableV2,
        layer: lambda_.ILayerVersion,
        runbook_base_url: str,
    ) -> PythonFunction:
        """The alert-group function: a cluster's pending incident transitions into at most one message per
        channel, when its group is due; and the daily summary."""
        p = self.policy
        function = PythonFunction(
            self,
            "AlertGroups",
            log_retention=self.log_retention,
            handler=ALERT_GROUPS_HANDLER,
            layer=layer,
            read_only=False,  # renders and queues only; it never calls HyperPod, EC2 or SSM
            timeout=cdk.Duration.seconds(ALERT_GROUP_TIMEOUT_S),
            memory_size=256,
            environment={
                "FINDINGS_TABLE": table.table_name,
                "IDEMPOTENCY_TABLE": idempotency_table.table_name,
                "OUTBOX_QUEUE_URL": self.outbox.queue_url,
                "ALERT_GROUP_QUEUE_URL": self.alert_group_queue.queue_url,
                "UNPROCESSED_QUEUE_URL": self.dlq.queue_url,
                "RUNBOOK_BASE_URL": runbook_base_url,
                "SLACK_MIN_PRIORITY": p.slack_min_priority,
                "EMAIL_MIN_PRIORITY": p.email_min_priority,
                "CHATBOT_MIN_PRIORITY": p.chat_min_priority,
                "DAILY_SUMMARY_CHANNELS": ",".join(p.daily_channels),
                **self._group_timing(),
                **self._channel_environment(),
            },
            statements=[
                iam.PolicyStatement(
                    # the incidents' pending transitions (read, then cleared) and the alert-group items: the
                    # clusters' partitions and the alert groups' partition only
                    sid="IncidentsAndAlertGroups",
                    actions=["dynamodb:Query", "dynamodb:GetItem", "dynamodb:UpdateItem"],
                    resources=[table.table_arn],
                    conditions={
                        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [ALERT_GROUP_PARTITION, "CLUSTER#*"]}
                    },
                ),
                iam.PolicyStatement(sid="QueueAlerts", actions=["sqs:SendMessage"], resources=[self.outbox.queue_arn]),
                iam.PolicyStatement(
                    # a transition that arrived during a flush arms the group again
                    sid="ScheduleAlertGroupFlush",
                    actions=["sqs:SendMessage"],
                    resources=[self.alert_group_queue.queue_arn],
                ),
                iam.PolicyStatement(
                    # an alert that cannot be rendered is kept, with its content, for inspection
                    sid="KeepUnrenderableAlerts",
                    actions=["sqs:SendMessage"],
                    resources=[self.dlq.queue_arn],
                ),
                iam.PolicyStatement(
                    sid="DeliveryLedger",
                    actions=["dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"],
                    resources=[idempotency_table.table_arn],
                ),
            ],
        )
        function.function.add_event_source(
            event_sources.SqsEventSource(self.alert_group_queue, batch_size=1, report_batch_item_failures=True)
        )
        self.daily_rule = events.Rule(
            self,
            "DailySummary",
            description="Once a day: what is open on each cluster, lower priorities included",
            schedule=events.Schedule.cron(minute="0", hour=str(p.daily_hour_utc)),
            targets=[targets.LambdaFunction(function.function, retry_attempts=2)],
        )
        return function

    def _event_bus_environment(self) -> dict[str, str]:
        """Where finding events go; without it the notifier queues none and the courier has no events channel."""
        return {"EVENT_BUS_NAME": self.event_bus} if self.event_bus else {}

    def _event_bus_statements(self) -> list[iam.PolicyStatement]:
        if self.event_bus_arn is None:
            return []
        return [
            iam.PolicyStatement(
                sid="PutFindingEvents",
                actions=["events:PutEvents"],
                resources=[self.event_bus_arn],
                # only the documented finding events (IAM's condition keys for PutEvents)
                conditions={
                    "StringEquals": {
                        "events:source": finding_event.SOURCE,
                        "events:detail-type": finding_event.DETAIL_TYPE,
                    }
                },
            )
        ]

    def _build_dlq_alarm(self) -> cloudwatch.Alarm:
        return alarm(
            self,
            "NotifierDlqDepth",
            self.dlq.metric_approximate_number_of_messages_visible(period=cdk.Duration.minutes(5)),
            "Undelivered finding notifications are waiting in the notifier DLQ",
            self.topic,
        )
