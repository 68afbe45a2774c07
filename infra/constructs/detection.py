"""Detection: EventBridge rules on HyperPod's own events feed the event Lambda; a schedule starts the sweep.

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
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from hyperpod_debugger.domain import eventbridge
from infra.constants import (
    EVENT_HANDLER,
    EVENT_TARGET_RETRY_ATTEMPTS,
    METRICS_NAMESPACE,
    MONITOR_METRICS_SERVICE,
)
from infra.constructs.notifications import alarm, encrypted_dlq
from infra.constructs.python_function import PythonFunction
from infra.constructs.sweep import triage_function

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


class Detection(Construct):
    """Exposes `function` (event handler), `rules` (detail-type -> Rule), `patterns` (detail-type ->
    EventPattern, as deployed), `schedule`, `dlq` (the unprocessed-events queue) and `alarms`."""

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
    ) -> None:
        super().__init__(scope, construct_id)
        try:
            allowlist = eventbridge.Allowlist.parse(cluster_allowlist)
        except ValueError as exc:
            raise ValueError(f"clusterAllowlist: {exc}") from None
        self.dlq = encrypted_dlq(self, "EventTargetDlq")
        self.function = triage_function(
            self,
            "EventHandler",
            handler=EVENT_HANDLER,
            layer=layer,
            table=table,
            idempotency_table=idempotency_table,
            cluster_allowlist=cluster_allowlist,
            log_retention=log_retention,
        )
        route_unprocessed(self.function, self.dlq)
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
            "errors": alarm(
                self,
                "EventHandlerErrors",
                function.metric_errors(period=cdk.Duration.minutes(5), statistic="Sum"),
                "The event handler failed; Lambda retries, then keeps the event in the unprocessed queue",
                topic,
            ),
        }
