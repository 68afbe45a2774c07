"""Detection: EventBridge rules on HyperPod's own events feed the event Lambda; a schedule starts the sweep.

    HyperPod event ─▶ rule ─▶ EventHandler (keeps the event, opens its cluster's window)
                                   └─▶ window queue (SQS, delayed ``eventWindowSeconds``) ─▶ EventWindow
                                         (one triage for every event of the window: the cluster read once,
                                          the named nodes probed)

The event function reads nothing of the cluster (no HyperPod, EC2 or Session Manager permission): it writes
the event into the findings table and sends the window's message. The window function is the one that triages.

Each rule's ``EventPattern`` is :func:`hyperpod_debugger.domain.eventbridge.rule_patterns`, written into the
template verbatim: the demo and the tests match events against the very same dictionaries.

Nothing is lost silently. An event EventBridge cannot deliver, an invocation that fails after Lambda's
retries (its on-failure destination) and an event the handler rejects as unusable all end in one
queue, ``unprocessed``, with the event itself; its depth, rejected events and handler errors each
raise an alarm on the alert topic.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from hyperpod_debugger.domain import eventbridge
from infra.constants import (
    DEFAULT_EVENT_WINDOW_SECONDS,
    EVENT_HANDLER,
    EVENT_TARGET_RETRY_ATTEMPTS,
    EVENT_WINDOW_HANDLER,
    METRICS_NAMESPACE,
    MONITOR_METRICS_SERVICE,
    WINDOW_MAX_CONCURRENCY,
)
from infra.constructs.notifications import alarm, encrypted_dlq
from infra.constructs.python_function import PythonFunction
from infra.constructs.sweep import triage_environment, triage_function

#: The window function's timeout: a 20,000-node cluster read, then up to EVENT_WINDOW_PROBE_MAX_NODES probes.
WINDOW_FUNCTION_TIMEOUT = cdk.Duration.minutes(5)
#: Receives of one window message before SQS keeps it in the unprocessed-events queue.
WINDOW_MAX_RECEIVES = 5

#: Lambda's own retries of an asynchronous invocation that failed (EventBridge and CloudWatch Logs
#: invoke asynchronously), before the event goes to the on-failure destination.
ASYNC_RETRY_ATTEMPTS = 2
MAX_EVENT_AGE = cdk.Duration.hours(6)


def route_unprocessed(function: PythonFunction, queue: sqs.IQueue) -> None:
    """Failed invocations go to ``queue`` (Lambda's on-failure destination); rejected inputs are put
    there by the handler itself (``UNPROCESSED_QUEUE_URL``, ``sqs:SendMessage`` on that queue only)."""
    function.function.configure_async_invoke(
        on_failure=destinations.SqsDestination(queue),
        retry_attempts=ASYNC_RETRY_ATTEMPTS,
        max_event_age=MAX_EVENT_AGE,
    )
    function.function.add_environment("UNPROCESSED_QUEUE_URL", queue.queue_url)
    function.policy.add_statements(
        iam.PolicyStatement(sid="KeepUnprocessed", actions=["sqs:SendMessage"], resources=[queue.queue_arn])
    )


def monitor_metric(name: str) -> cloudwatch.Metric:
    """A metric the functions emit through Powertools (namespace and its ``service`` dimension)."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": MONITOR_METRICS_SERVICE},
        statistic="Sum",
        period=cdk.Duration.minutes(5),
    )


def window_statements(table: dynamodb.ITableV2, queue: sqs.IQueue) -> list[iam.PolicyStatement]:
    """What keeping an event for its window needs: the event and window items, and the window's message."""
    return [
        iam.PolicyStatement(
            sid="KeepEventsForWindows",
            actions=["dynamodb:PutItem", "dynamodb:DeleteItem"],
            resources=[table.table_arn],
        ),
        iam.PolicyStatement(sid="ScheduleWindows", actions=["sqs:SendMessage"], resources=[queue.queue_arn]),
    ]


def window_environment(queue: sqs.IQueue, window_seconds: int) -> dict[str, str]:
    return {"EVENT_WINDOW_QUEUE_URL": queue.queue_url, "EVENT_WINDOW_S": str(window_seconds)}


class Detection(Construct):
    """Exposes `function` (event handler: keeps events for their windows), `window_queue`, `window_function`
    (one triage per window), `rules` (detail-type -> Rule), `patterns` (detail-type -> EventPattern, as
    deployed), `schedule`, `dlq` (the unprocessed-events queue) and `alarms`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITableV2,
        idempotency_table: dynamodb.ITableV2,
        layer: lambda_.ILayerVersion,
        state_machine: sfn.IStateMachine,
        schedule_expression: str,
        cluster_allowlist: list[str],
        log_retention: logs.RetentionDays,
        alarm_topic: sns.ITopic,
        window_seconds: int = DEFAULT_EVENT_WINDOW_SECONDS,
    ) -> None:
        super().__init__(scope, construct_id)
        try:
            allowlist = eventbridge.Allowlist.parse(cluster_allowlist)
        except ValueError as exc:
            raise ValueError(f"clusterAllowlist: {exc}") from None
        if not 1 <= window_seconds <= 900:
            raise ValueError(f"eventWindowSeconds must be within 1..900 (SQS's longest delay), got {window_seconds}")
        self.window_seconds = window_seconds
        self.dlq = encrypted_dlq(self, "EventTargetDlq")
        self.window_queue = sqs.Queue(
            self,
            "EventWindowQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            # Lambda's advice for SQS sources: six times the function's timeout
            visibility_timeout=cdk.Duration.seconds(6 * WINDOW_FUNCTION_TIMEOUT.to_seconds()),
            retention_period=cdk.Duration.days(4),
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=WINDOW_MAX_RECEIVES, queue=self.dlq),
        )
        self.function = PythonFunction(
            self,
            "EventHandler",
            handler=EVENT_HANDLER,
            layer=layer,
            read_only=False,  # keeps the event and opens its window; the window function reads the cluster
            statements=window_statements(table, self.window_queue),
            timeout=cdk.Duration.seconds(30),
            memory_size=512,
            log_retention=log_retention,
            environment={
                **triage_environment(table, idempotency_table, cluster_allowlist),
                **window_environment(self.window_queue, window_seconds),
            },
        )
        route_unprocessed(self.function, self.dlq)
        self.window_function = triage_function(
            self,
            "EventWindow",
            handler=EVENT_WINDOW_HANDLER,
            layer=layer,
            table=table,
            idempotency_table=idempotency_table,
            cluster_allowlist=cluster_allowlist,
            log_retention=log_retention,
            extra_statements=[
                # claim a due window (delete its record) and forget the events it handled
                iam.PolicyStatement(sid="ClaimWindows", actions=["dynamodb:DeleteItem"], resources=[table.table_arn])
            ],
        )
        self.window_function.function.add_environment("UNPROCESSED_QUEUE_URL", self.dlq.queue_url)
        self.window_function.policy.add_statements(
            iam.PolicyStatement(sid="KeepUnprocessed", actions=["sqs:SendMessage"], resources=[self.dlq.queue_arn]),
            iam.PolicyStatement(
                sid="ReadWindowQueue",
                actions=[
                    "sqs:ReceiveMessage",
                    "sqs:DeleteMessage",
                    "sqs:GetQueueAttributes",
                    "sqs:ChangeMessageVisibility",
                ],
                resources=[self.window_queue.queue_arn],
            ),
        )
        # Each window's probes start sessions at their own pace: the source bounds how many run at once, so
        # the windows' share of the account's StartSession rate has a ceiling (a window not yet taken waits in
        # the queue; reserved concurrency would instead throttle it and spend its receives).
        self.window_function.function.add_event_source(
            event_sources.SqsEventSource(
                self.window_queue,
                batch_size=1,
                report_batch_item_failures=True,
                max_concurrency=WINDOW_MAX_CONCURRENCY,
            )
        )
        self.patterns = eventbridge.rule_patterns(allowlist)
        ids = {
            eventbridge.CLUSTER_EVENT: "ClusterEventRule",
            eventbridge.STATE_CHANGE: "StateChangeRule",
            eventbridge.NODE_HEALTH: "NodeHealthRule",
        }
        self.rules = {dt: self._build_rule(ids[dt], dt, pattern) for dt, pattern in self.patterns.items()}
        self.schedule = events.Rule(
            self,
            "SweepSchedule",
            description="Starts the HyperPod sweep",
            schedule=events.Schedule.expression(schedule_expression),
            targets=[targets.SfnStateMachine(state_machine, dead_letter_queue=self.dlq, retry_attempts=2)],
        )
        self.alarms = self._build_alarms(alarm_topic)

    def _build_rule(self, construct_id: str, detail_type: str, pattern: dict) -> events.Rule:
        rule = events.Rule(
            self,
            construct_id,
            description=f"HyperPod '{detail_type}' events to the event handler",
            # a placeholder the override below replaces with the shared pattern, operators and all
            event_pattern=events.EventPattern(source=[eventbridge.SOURCE], detail_type=[detail_type]),
            targets=[
                targets.LambdaFunction(
                    self.function.function,
                    dead_letter_queue=self.dlq,
                    retry_attempts=EVENT_TARGET_RETRY_ATTEMPTS,
                    max_event_age=cdk.Duration.hours(2),
                )
            ],
        )
        cfn = rule.node.default_child
        assert isinstance(cfn, events.CfnRule)
        cfn.add_property_override("EventPattern", pattern)
        return rule

    def _build_alarms(self, topic: sns.ITopic) -> dict[str, cloudwatch.Alarm]:
        function = self.function.function
        return {
            "unprocessed": alarm(
                self,
                "UnprocessedEvents",
                self.dlq.metric_approximate_number_of_messages_visible(period=cdk.Duration.minutes(5)),
                "HyperPod events the monitor could not process are waiting in the unprocessed-events queue "
                "(the event itself is in the message; the reason in its attributes)",
                topic,
            ),
            "rejected": alarm(
                self,
                "EventsRejected",
                monitor_metric("EventsRejected"),
                "The event handler rejected a HyperPod event it could not read (kept in the unprocessed queue)",
                topic,
            ),
            "window_errors": alarm(
                self,
                "EventWindowErrors",
                self.window_function.function.metric_errors(period=cdk.Duration.minutes(5), statistic="Sum"),
                "The event-window function failed; SQS retries the window (its events stay kept), then keeps "
                "the window's message in the unprocessed queue",
                topic,
            ),
            "errors": alarm(
                self,
                "EventHandlerErrors",
                function.metric_errors(period=cdk.Duration.minutes(5), statistic="Sum"),
                "The event handler failed; Lambda retries, then keeps the event in the unprocessed queue",
                topic,
            ),
        }
