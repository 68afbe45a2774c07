"""Alerts: a KMS-encrypted SNS topic with email subscriptions, the Slack webhook secret, and the stream notifier.

The notifier reads the findings table's stream (transitions only are decided in the handler), posts to Slack
and publishes to SNS. Failed batches are bisected and retried, then land in an SQS DLQ whose depth raises an
alarm on the same topic, so no finding is lost silently.
"""

from __future__ import annotations

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

from infra.constants import STREAM_BATCH_SIZE, STREAM_NOTIFIER_HANDLER, STREAM_RETRY_ATTEMPTS
from infra.constructs.python_function import PythonFunction


def encrypted_dlq(scope: Construct, construct_id: str) -> sqs.Queue:
    """An SQS dead-letter queue: SSE, TLS-only, 14 days of retention."""
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=cdk.Duration.days(14),
    )


def alarm(
    scope: Construct, construct_id: str, metric: cloudwatch.IMetric, description: str, topic: sns.ITopic
) -> cloudwatch.Alarm:
    """An alarm when ``metric`` is above zero in a period (no data: not breaching), sent to ``topic``."""
    created = cloudwatch.Alarm(
        scope,
        construct_id,
        alarm_description=description,
        metric=metric,
        threshold=0,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods=1,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    created.add_alarm_action(cw_actions.SnsAction(topic))
    return created


class Notifications(Construct):
    """Exposes `key`, `topic`, `slack_secret`, `dlq`, `dlq_alarm` and `notifier` (a PythonFunction)."""

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
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = self._build_key()
        self.topic = self._build_topic(alert_emails)
        self.slack_secret = secretsmanager.Secret.from_secret_name_v2(self, "SlackWebhook", slack_secret_name)
        self.dlq = encrypted_dlq(self, "NotifierDlq")
        self.notifier = self._build_notifier(table, idempotency_table, layer, runbook_base_url)
        self.dlq_alarm = self._build_dlq_alarm()

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
            read_only=False,  # renders and delivers only; it never calls HyperPod, EC2 or SSM
            timeout=cdk.Duration.minutes(2),
            memory_size=256,
            environment={
                "IDEMPOTENCY_TABLE": idempotency_table.table_name,
                "ALERT_TOPIC_ARN": self.topic.topic_arn,
                "SLACK_SECRET_NAME": self.slack_secret.secret_name,
                "RUNBOOK_BASE_URL": runbook_base_url,
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
                    # the delivery ledger: which channel already carried which stream record
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

    def _build_dlq_alarm(self) -> cloudwatch.Alarm:
        return alarm(
            self,
            "NotifierDlqDepth",
            self.dlq.metric_approximate_number_of_messages_visible(period=cdk.Duration.minutes(5)),
            "Undelivered finding notifications are waiting in the notifier DLQ",
            self.topic,
        )
