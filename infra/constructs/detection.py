"""Detection: EventBridge rules on HyperPod's own events feed the event Lambda; a schedule starts the sweep."""

from __future__ import annotations

import re

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.constants import (
    CLUSTER_EVENT_LEVELS,
    DETAIL_TYPE_CLUSTER_EVENT,
    DETAIL_TYPE_NODE_HEALTH,
    DETAIL_TYPE_STATE_CHANGE,
    EVENT_HANDLER,
    EVENT_SOURCE,
    EVENT_TARGET_RETRY_ATTEMPTS,
)
from infra.constructs.notifications import encrypted_dlq
from infra.constructs.sweep import triage_function

#: A HyperPod cluster id, the last part of its ARN (botocore's ClusterArn pattern).
CLUSTER_ID = re.compile(r"^[a-z0-9]{12}$")


def split_allowlist(allowlist: list[str]) -> tuple[list[str], list[str]]:
    """(cluster ARNs or ids, cluster names). Events carry the ARN (with the id, never the name) in
    ``resources`` and the name in ``detail.ClusterName``; a rule can filter on one or the other."""
    by_arn = [e for e in allowlist if e.startswith("arn:") or CLUSTER_ID.match(e)]
    names = [e for e in allowlist if e not in by_arn]
    return by_arn, names


def cluster_resource_prefixes(stack: cdk.Stack, allowlist: list[str]) -> list[str]:
    """Allowlist entries are cluster ARNs (or ARN prefixes) or cluster ids; ids become ARN prefixes."""
    prefixes = []
    for entry in allowlist:
        if entry.startswith("arn:"):
            prefixes.append(entry)
        else:
            prefixes.append(stack.format_arn(service="sagemaker", resource="cluster", resource_name=entry))
    return prefixes


class Detection(Construct):
    """Exposes `function` (event handler), `rules` (detail-type -> Rule), `schedule` and `dlq`."""

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
    ) -> None:
        super().__init__(scope, construct_id)
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
        by_arn, names = split_allowlist(cluster_allowlist)
        if by_arn and names:
            raise ValueError(
                "clusterAllowlist mixes cluster names "
                f"({', '.join(names)}) with cluster ids or ARNs ({', '.join(by_arn)}): an EventBridge rule "
                "filters on one or the other, so give all names or all ids/ARNs"
            )
        resources = self._resources_filter(by_arn)
        named = {"ClusterName": names} if names else {}
        self.rules = {
            DETAIL_TYPE_CLUSTER_EVENT: self._build_rule(
                "ClusterEventRule",
                DETAIL_TYPE_CLUSTER_EVENT,
                resources,
                {"EventLevel": list(CLUSTER_EVENT_LEVELS), **named},
            ),
            DETAIL_TYPE_STATE_CHANGE: self._build_rule(
                "StateChangeRule", DETAIL_TYPE_STATE_CHANGE, resources, named or None
            ),
            DETAIL_TYPE_NODE_HEALTH: self._build_rule(
                "NodeHealthRule", DETAIL_TYPE_NODE_HEALTH, resources, named or None
            ),
        }
        self.schedule = events.Rule(
            self,
            "SweepSchedule",
            description="Starts the HyperPod sweep",
            schedule=events.Schedule.expression(schedule_expression),
            targets=[targets.SfnStateMachine(state_machine, dead_letter_queue=self.dlq, retry_attempts=2)],
        )

    def _resources_filter(self, allowlist: list[str]) -> list[str] | None:
        if not allowlist:
            return None
        prefixes = cluster_resource_prefixes(cdk.Stack.of(self), allowlist)
        return events.Match.any_of(*(events.Match.prefix(p) for p in prefixes))

    def _build_rule(
        self, construct_id: str, detail_type: str, resources: list[str] | None, detail: dict | None = None
    ) -> events.Rule:
        return events.Rule(
            self,
            construct_id,
            description=f"HyperPod '{detail_type}' events to the event handler",
            event_pattern=events.EventPattern(
                source=[EVENT_SOURCE], detail_type=[detail_type], resources=resources, detail=detail
            ),
            targets=[
                targets.LambdaFunction(
                    self.function.function,
                    dead_letter_queue=self.dlq,
                    retry_attempts=EVENT_TARGET_RETRY_ATTEMPTS,
                    max_event_age=cdk.Duration.hours(2),
                )
            ],
        )
