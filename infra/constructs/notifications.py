"""Alerts: a KMS-encrypted SNS topic with email subscriptions, the Slack webhook secret, the stream
notifier, the outbox and its courier.

    findings stream ─▶ stream_notifier ─▶ outbox (SQS FIFO) ─▶ courier ─▶ Slack, SNS email
                           │                    │
                           └▶ notifier DLQ      └▶ outbox DLQ (the rendered message itself)

The notifier renders each transition and queues one message per channel in the outbox, grouped by
channel and cluster so a message that waits holds back the later ones of its cluster. The courier
makes one attempt per message per invocation; a failure waits for a backoff in the queue, for about
48 hours, before the message moves, whole, to the outbox's dead-letter queue: a day-long Slack
outage delays alerts and loses none. Each queue's depth, and an alert waiting in the outbox for more
than an hour, raise an alarm on the same topic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from hyperpod_debugger.notify import finding_event
from infra.constants import (
    COURIER_HANDLER,
    COURIER_TIMEOUT_S,
    OUTBOX_BATCH_SIZE,
    OUTBOX_MAX_AGE_S,
    OUTBOX_MAX_RECEIVES,
    OUTBOX_RETENTION_DAYS,
    OUTBOX_VISIBILITY_S,
    STREAM_BATCH_SIZE,
    STREAM_NOTIFIER_HANDLER,
    STREAM_RETRY_ATTEMPTS,
)
from infra.constructs.python_function import PythonFunction

#: What PutEvents takes as EventBusName for a bus it may put on (no partner buses): a name or a bus ARN.
_EVENT_BUS = re.compile(r"(arn:aws[\w-]*:events:[a-z]+-[a-z]+-[\w-]+:[0-9]{12}:event-bus/)?[.\-_A-Za-z0-9]{1,256}")


def event_bus_arn(scope: Construct, bus: str) -> str:
    """The ARN of the finding events' bus, given as a name (this account and Region) or as an ARN."""
    if not _EVENT_BUS.fullmatch(bus) or len(bus) > 1600:
        raise ValueError(
            f"findingsEventBus must be 'default', an event bus name or an event bus ARN "
            f"(arn:<partition>:events:<region>:<account>:event-bus/<name>), or 'none'; got {bus!r}"
        )
    if bus.startswith("arn:"):
        return bus
    return cdk.Stack.of(scope).format_arn(service="events", resource="event-bus", resource_name=bus)


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
        slack_secret_name: str,
        runbook_base_url: str = "",
        event_bus: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.event_bus = event_bus
        self.event_bus_arn = event_bus_arn(self, event_bus) if event_bus else None
        self.key = self._build_key()
        self.topic = self._build_topic(alert_emails)
        self.slack_secret = secretsmanager.Secret.from_secret_name_v2(self, "SlackWebhook", slack_secret_name)
        self.dlq = encrypted_dlq(self, "NotifierDlq")
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
        self.courier = self._build_courier(idempotency_table, layer)
        self.dlq_alarm = self._build_dlq_alarm()
        self.alarms = {
            "notifier_dlq": self.dlq_alarm,
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
            handler=STREAM_NOTIFIER_HANDLER,
            layer=layer,
            read_only=False,  # renders and queues only; it never calls HyperPod, EC2 or SSM
            timeout=cdk.Duration.minutes(2),
            memory_size=256,
            environment={
                "IDEMPOTENCY_TABLE": idempotency_table.table_name,
                # which channels exist (the courier alone reads the secret and publishes)
                "ALERT_TOPIC_ARN": self.topic.topic_arn,
                "SLACK_SECRET_NAME": self.slack_secret.secret_name,
                "RUNBOOK_BASE_URL": runbook_base_url,
                "OUTBOX_QUEUE_URL": self.outbox.queue_url,
                "UNPROCESSED_QUEUE_URL": self.dlq.queue_url,
                **self._event_bus_environment(),
            },
            statements=[
                iam.PolicyStatement(sid="QueueAlerts", actions=["sqs:SendMessage"], resources=[self.outbox.queue_arn]),
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
                # Only finding items can carry a transition; history, sweep and probe-rotation records
                # (and TTL deletions, which have no new image) never wake the notifier.
                filters=[lambda_.FilterCriteria.filter({"dynamodb": {"NewImage": {"item_type": {"S": ["FINDING"]}}}})],
            )
        )
        return notifier

    def _build_courier(self, idempotency_table: dynamodb.ITableV2, layer: lambda_.ILayerVersion) -> PythonFunction:
        courier = PythonFunction(
            self,
            "Courier",
            handler=COURIER_HANDLER,
            layer=layer,
            read_only=False,  # delivers only; it never calls HyperPod, EC2 or SSM
            timeout=cdk.Duration.seconds(COURIER_TIMEOUT_S),
            memory_size=256,
            environment={
                "IDEMPOTENCY_TABLE": idempotency_table.table_name,
                "ALERT_TOPIC_ARN": self.topic.topic_arn,
                "SLACK_SECRET_NAME": self.slack_secret.secret_name,
                "OUTBOX_QUEUE_URL": self.outbox.queue_url,
                "OUTBOX_DLQ_URL": self.outbox_dlq.queue_url,
                "SLACK_TIMEOUT_S": "5",
                **self._event_bus_environment(),
            },
            statements=[
                iam.PolicyStatement(sid="PublishAlerts", actions=["sns:Publish"], resources=[self.topic.topic_arn]),
                iam.PolicyStatement(
                    sid="AlertTopicKey",
                    actions=["kms:Decrypt", "kms:GenerateDataKey"],
                    resources=[self.key.key_arn],
                ),
                iam.PolicyStatement(
                    sid="SlackWebhookSecret",
                    actions=["secretsmanager:GetSecretValue"],
                    # from_secret_name_v2 has no random suffix; match the six characters Secrets Manager adds.
                    resources=[f"{self.slack_secret.secret_arn}-??????"],
                ),
                iam.PolicyStatement(
                    # the delivery ledger: which messages were already sent
                    sid="DeliveryLedger",
                    actions=["dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"],
                    resources=[idempotency_table.table_arn],
                ),
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
        courier.function.add_event_source(
            event_sources.SqsEventSource(self.outbox, batch_size=OUTBOX_BATCH_SIZE, report_batch_item_failures=True)
        )
        return courier

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
