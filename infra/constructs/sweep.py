"""The scheduled sweep: a Step Functions state machine that lists clusters and maps the sweep Lambda over them.

`MaxConcurrency` comes from the StartSession budget (context `startSessionRate`), so concurrent per-cluster
sweeps never exceed the SSM StartSession rate; each invocation covers a batch of nodes and returns well
before Lambda's 15-minute limit, and successive sweeps cover large clusters over time.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from infra.constants import GSI_BY_NODE, SWEEP_HANDLER
from infra.constructs.python_function import PythonFunction


def findings_write_statements(
    table: dynamodb.ITableV2, idempotency_table: dynamodb.ITableV2
) -> list[iam.PolicyStatement]:
    """What a triage function needs on our own tables: conditional writes and the by_node index."""
    return [
        iam.PolicyStatement(
            sid="FindingsReadWrite",
            actions=[
                "dynamodb:GetItem",
                "dynamodb:Query",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:DeleteItem",
                "dynamodb:TransactWriteItems",
            ],
            resources=[table.table_arn, f"{table.table_arn}/index/{GSI_BY_NODE}"],
        ),
        iam.PolicyStatement(
            sid="Idempotency",
            actions=["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"],
            resources=[idempotency_table.table_arn],
        ),
    ]


class Sweep(Construct):
    """Exposes `function` (the per-cluster sweep PythonFunction) and `state_machine`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITableV2,
        idempotency_table: dynamodb.ITableV2,
        layer: lambda_.ILayerVersion,
        max_concurrency: int,
        cluster_allowlist: list[str],
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        self.max_concurrency = max_concurrency
        self.function = PythonFunction(
            self,
            "SweepCluster",
            handler=SWEEP_HANDLER,
            layer=layer,
            statements=findings_write_statements(table, idempotency_table),
            timeout=cdk.Duration.minutes(10),
            memory_size=1024,
            log_retention=log_retention,
            environment={
                "FINDINGS_TABLE": table.table_name,
                "IDEMPOTENCY_TABLE": idempotency_table.table_name,
                # the account allows about 3 StartSession calls a second; the Map workers share them
                "START_SESSION_RATE": f"{3.0 / max(max_concurrency, 1):.3f}",
                "CLUSTER_ALLOWLIST": ",".join(cluster_allowlist),
            },
        )
        self.state_machine = self._build_state_machine(log_retention)

    def _build_definition(self) -> sfn.IChainable:
        list_clusters = tasks.CallAwsService(
            self,
            "ListClusters",
            service="sagemaker",
            action="listClusters",
            iam_action="sagemaker:ListClusters",
            iam_resources=["*"],
            parameters={"MaxResults": 100},
            result_selector={"clusters.$": "$.ClusterSummaries"},
        )
        sweep_one = tasks.LambdaInvoke(
            self,
            "SweepOneCluster",
            lambda_function=self.function.function,
            payload_response_only=True,
            retry_on_service_exceptions=True,
        )
        sweep_one.add_retry(
            errors=["States.TaskFailed"], max_attempts=2, backoff_rate=2, interval=cdk.Duration.seconds(5)
        )
        per_cluster = sfn.Map(
            self,
            "EachCluster",
            items_path="$.clusters",
            max_concurrency=self.max_concurrency,
            item_selector={
                "cluster_name.$": "$$.Map.Item.Value.ClusterName",
                "cluster_arn.$": "$$.Map.Item.Value.ClusterArn",
                "sweep_id.$": "$$.Execution.Name",
            },
            result_path=sfn.JsonPath.DISCARD,
        )
        per_cluster.item_processor(sweep_one)
        return list_clusters.next(per_cluster).next(sfn.Succeed(self, "Done"))

    def _build_state_machine(self, log_retention: logs.RetentionDays) -> sfn.StateMachine:
        log_group = logs.LogGroup(self, "Logs", retention=log_retention, removal_policy=cdk.RemovalPolicy.RETAIN)
        return sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(self._build_definition()),
            timeout=cdk.Duration.minutes(14),
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=False),
        )
