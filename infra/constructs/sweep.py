"""The scheduled sweep: a Step Functions state machine that pages through ListClusters, runs each cluster's
checks, then probes that cluster's nodes in batches.

    ListClusters ─▶ EachCluster (Map) ─▶ more pages? ─▶ ListMoreClusters ─┐
                      │                     ▲                          │
                      │                     └──────────────────────────┘
                      └─ CheckCluster (Lambda: API checks, its share of the budget, the plan in the table)
                           └─ EachBatch (Map) ─ WaitForRound ─ ProbeNodes (Lambda: one stored batch)

The sweep's StartSession budget is the account's rate (context ``startSessionRate``, about 3 calls a second)
less the share reserved for people's own sessions (``startSessionReservePercent``, 34 %) and less the event
windows' probes (0.5 a second): 1.48 a second by default (``hyperpod_debugger.lifecycle.budget``). It is shared
at run time (``budget.share``): each cluster step takes ``budget ÷ the clusters running at once`` of this page,
splits it into workers of about one call a second, and plans one batch per worker per round; the rounds run
from the end of its checks to shortly before the next sweep, each short enough for its Lambda to drain its
sessions. A batch slows down on its own while Session Manager throttles (``probe.pace.SessionPace``); what it
could not start stays due. The state carries batch numbers and round starts only; the rotation
(``hyperpod_debugger.lifecycle.rotation``) probes every Running node at least once per ``probePeriodHours``
across successive sweeps, suspects first.
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

from functions.shared.events import PROBE_ITEM_SELECTOR
from hyperpod_debugger.aws.iam import STORE_ACTIONS
from hyperpod_debugger.lifecycle.budget import PROBE_TIMEOUT_S, SweepSettings
from infra.constants import GSI_BY_NODE, PROBE_BATCH_HANDLER, SWEEP_HANDLER
from infra.constructs.python_function import PythonFunction


def findings_write_statements(
    table: dynamodb.ITableV2, idempotency_table: dynamodb.ITableV2
) -> list[iam.PolicyStatement]:
    """What a triage function needs on our own tables: conditional writes and the by_node index."""
    return [
        iam.PolicyStatement(
            sid="FindingsReadWrite",
            actions=list(STORE_ACTIONS),
            resources=[table.table_arn, f"{table.table_arn}/index/{GSI_BY_NODE}"],
        ),
        iam.PolicyStatement(
            sid="Idempotency",
            actions=["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"],
            resources=[idempotency_table.table_arn],
        ),
    ]


def triage_environment(
    table: dynamodb.ITableV2, idempotency_table: dynamodb.ITableV2, cluster_allowlist: list[str]
) -> dict[str, str]:
    """What every function that runs a triage into the store is told (event, log subscription, sweep)."""
    return {
        "FINDINGS_TABLE": table.table_name,
        "IDEMPOTENCY_TABLE": idempotency_table.table_name,
        "CLUSTER_ALLOWLIST": ",".join(cluster_allowlist),
    }


def triage_function(
    scope: Construct,
    construct_id: str,
    *,
    handler: str,
    layer: lambda_.ILayerVersion,
    table: dynamodb.ITableV2,
    idempotency_table: dynamodb.ITableV2,
    cluster_allowlist: list[str],
    log_retention: logs.RetentionDays,
    extra_statements: list[iam.PolicyStatement] | None = None,
) -> PythonFunction:
    """A function that runs triages into the store (a window of HyperPod events, HMA log records)."""
    return PythonFunction(
        scope,
        construct_id,
        handler=handler,
        layer=layer,
        statements=[*findings_write_statements(table, idempotency_table), *(extra_statements or [])],
        timeout=cdk.Duration.minutes(5),
        memory_size=1024,
        log_retention=log_retention,
        environment=triage_environment(table, idempotency_table, cluster_allowlist),
    )


class Sweep(Construct):
    """Exposes `function` (the cluster step), `probe_function` (a probe batch), `settings` and `state_machine`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITableV2,
        idempotency_table: dynamodb.ITableV2,
        layer: lambda_.ILayerVersion,
        settings: SweepSettings,
        interval: cdk.Duration,
        probe_period: cdk.Duration,
        cluster_allowlist: list[str],
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        self.settings = settings
        self.interval = interval
        environment = {
            **triage_environment(table, idempotency_table, cluster_allowlist),
            # the sweep's part of the account's rate (less people's reserve and the event windows' probes);
            # each cluster step takes its share at run time
            "START_SESSION_RATE": f"{settings.usable_rate:.3f}",
            "SWEEP_CLUSTER_CONCURRENCY": str(settings.cluster_concurrency),
            "PROBE_TIMEOUT_S": str(PROBE_TIMEOUT_S),
            "SWEEP_INTERVAL_S": str(int(interval.to_seconds())),
            "PROBE_PERIOD_S": str(int(probe_period.to_seconds())),
        }

        def step(construct_id: str, handler: str, minutes: int) -> PythonFunction:
            return PythonFunction(
                self,
                construct_id,
                handler=handler,
                layer=layer,
                statements=findings_write_statements(table, idempotency_table),
                timeout=cdk.Duration.minutes(minutes),
                memory_size=1024,
                log_retention=log_retention,
                environment=environment,
            )

        # the cluster step's API checks take seconds to a few minutes; a batch's probes up to ~4 minutes
        self.function = step("SweepCluster", SWEEP_HANDLER, 5)
        self.probe_function = step("ProbeBatch", PROBE_BATCH_HANDLER, 10)
        self.state_machine = self._build_state_machine(log_retention)

    def _invoke(self, construct_id: str, function: PythonFunction, *, retry_failed: bool) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(
            self,
            construct_id,
            lambda_function=function.function,
            payload_response_only=True,
            retry_on_service_exceptions=True,
        )
        if retry_failed:
            task.add_retry(
                errors=["States.TaskFailed"], max_attempts=2, backoff_rate=2, interval=cdk.Duration.seconds(5)
            )
        return task

    def _list_clusters(self, construct_id: str, parameters: dict) -> tasks.CallAwsService:
        task = tasks.CallAwsService(
            self,
            construct_id,
            service="sagemaker",
            action="listClusters",
            iam_action="sagemaker:ListClusters",
            iam_resources=["*"],
            parameters=parameters,
            result_path="$.page",
        )
        # SDK integrations are not retried by Step Functions: one throttled ListClusters would end the whole
        # sweep (the rehearsal showed it). A read, so any failure may be tried again; the error's name for an
        # unmodelled SageMaker error is not documented, hence States.TaskFailed.
        task.add_retry(
            errors=["States.TaskFailed"],
            max_attempts=4,
            backoff_rate=2,
            interval=cdk.Duration.seconds(1),
            jitter_strategy=sfn.JitterType.FULL,
        )
        return task

    def _per_cluster(self) -> sfn.IChainable:
        """One cluster: its checks and rotation plan, then its probe batches; a failure stays in the cluster."""
        check = self._invoke("CheckCluster", self.function, retry_failed=True)
        # A failed batch is not retried within the sweep: its nodes stay due and lead the next rotation.
        probe = self._invoke("ProbeNodes", self.probe_function, retry_failed=False)
        probe.add_catch(sfn.Pass(self, "BatchFailed"), errors=["States.ALL"], result_path="$.error")
        # The cluster step stored the plan in the table: the items are batch numbers with their round's start,
        # and each probe step reads its nodes by (cluster, sweep, batch); no node list passes through the state.
        # Every batch is in flight at once (the cluster step says how many), each waiting for its round.
        each_batch = sfn.Map(
            self,
            "EachBatch",
            items_path="$.batches",
            item_selector=dict(PROBE_ITEM_SELECTOR),
            max_concurrency_path="$.concurrency",
            result_path=sfn.JsonPath.DISCARD,
        )
        wait = sfn.Wait(self, "WaitForRound", time=sfn.WaitTime.timestamp_path("$.start_at"))
        each_batch.item_processor(wait.next(probe))
        # Keep the cluster's output small: the outer Map gathers one per cluster.
        done = sfn.Pass(self, "ClusterDone", parameters={"status.$": "$.status"})
        failed = sfn.Pass(self, "ClusterFailed", parameters={"status": "failed", "error.$": "$.error"})
        check.add_catch(failed, errors=["States.ALL"], result_path="$.error")
        return check.next(each_batch).next(done)

    def _build_definition(self) -> sfn.IChainable:
        first_page = self._list_clusters("ListClusters", {"MaxResults": 100})
        next_page = self._list_clusters("ListMoreClusters", {"MaxResults": 100, "NextToken.$": "$.page.NextToken"})
        each_cluster = sfn.Map(
            self,
            "EachCluster",
            items_path="$.page.ClusterSummaries",
            max_concurrency=self.settings.cluster_concurrency,
            item_selector={
                "cluster_name.$": "$$.Map.Item.Value.ClusterName",
                "cluster_arn.$": "$$.Map.Item.Value.ClusterArn",
                "sweep_id.$": "$$.Execution.Name",
                # the budget is shared among the clusters of this page (pages run one after another)
                "clusters.$": "States.ArrayLength($.page.ClusterSummaries)",
                "sweep_started.$": "$$.Execution.StartTime",
            },
            result_path=sfn.JsonPath.DISCARD,
        )
        each_cluster.item_processor(self._per_cluster())
        more = sfn.Choice(self, "MorePages")
        more.when(sfn.Condition.is_present("$.page.NextToken"), next_page.next(each_cluster))
        more.otherwise(sfn.Succeed(self, "Done"))
        return first_page.next(each_cluster).next(more)

    def _build_state_machine(self, log_retention: logs.RetentionDays) -> sfn.StateMachine:
        log_group = logs.LogGroup(self, "Logs", retention=log_retention, removal_policy=cdk.RemovalPolicy.RETAIN)
        return sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(self._build_definition()),
            # the last round's sessions may finish after the next sweep began (they stopped starting before)
            timeout=self.interval.plus(cdk.Duration.seconds(PROBE_TIMEOUT_S)).plus(cdk.Duration.minutes(3)),
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=False),
        )
