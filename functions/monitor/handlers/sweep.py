"""The sweep's cluster step (one item of the state machine's outer Map): the cluster's API checks and,
on Slurm, the controller's view into the store, then this sweep's node probes as batches for the
inner Map (:func:`functions.monitor.logic.sweep.sweep_cluster`)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from functions.monitor import fleet_metrics
from functions.monitor.logic import sweep
from functions.monitor.runtime import now, validation_errors, with_env
from functions.shared.clients import clients
from functions.shared.env import SweepEnv, sweep_env
from functions.shared.observability import logger, metrics, tracer
from functions.shared.odd_input import without_surrogates
from functions.shared.sweep_items import SweepItem
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.store.findings import FindingStore
from hyperpod_debugger.store.incidents import IncidentStore
from hyperpod_debugger.triage import TriageRequest, triage_with_observation

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


def _request(env: SweepEnv, item: SweepItem, started: datetime) -> TriageRequest:
    # max_nodes=0: on Slurm the controller is still read through a session; node probes come in batches.
    options = ProbeOptions(
        max_nodes=0, rate=env.START_SESSION_RATE, timeout=env.PROBE_TIMEOUT_S, documents=env.session_documents
    )
    return TriageRequest(
        cluster=item.cluster, region=env.AWS_REGION, now=started, probe=env.PROBE_ENABLED, probe_options=options
    )


def _budget(env: SweepEnv, item: SweepItem, began: datetime) -> sweep.SweepBudget:
    return sweep.SweepBudget(
        rate=env.START_SESSION_RATE,
        clusters=item.clusters,
        cluster_concurrency=env.SWEEP_CLUSTER_CONCURRENCY,
        interval_s=env.SWEEP_INTERVAL_S,
        period_s=env.PROBE_PERIOD_S,
        probe_timeout_s=env.PROBE_TIMEOUT_S,
        began=began,
        max_nodes=env.PROBE_MAX_NODES,
        max_batch=env.PROBE_BATCH_SIZE,
    )


@with_env(sweep_env)
@logger.inject_lambda_context(correlation_id_path="sweep_id", log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = sweep_env()
    try:
        item = SweepItem.model_validate(without_surrogates(event))  # a lone surrogate reads as U+FFFD
    except ValidationError as exc:
        errors = validation_errors(exc)
        logger.error("sweep input rejected", errors=errors)
        return {"status": "rejected", "reason": errors[0]["error"], "errors": errors, "batches": [], "concurrency": 1}
    if not env.allows(item.cluster_name, item.cluster_arn):
        return {
            "status": "skipped",
            "cluster": item.cluster,
            "reason": "not in CLUSTER_ALLOWLIST",
            "batches": [],
            "concurrency": 1,
        }
    started = now()
    aws = clients(env.AWS_REGION)
    store = FindingStore(aws, env.FINDINGS_TABLE, history_ttl=env.history_ttl)
    incidents = IncidentStore(aws, env.FINDINGS_TABLE, ttl=env.history_ttl)
    result = sweep.sweep_cluster(
        _request(env, item, started),
        triage=lambda request: triage_with_observation(request, aws),
        store=store,
        incidents=incidents,
        repair_grace=env.repair_grace,
        settings=_budget(env, item, item.sweep_started or started).settings_at if env.PROBE_ENABLED else None,
        clock=now,
        sweep_id=item.sweep_id or f"manual-{uuid.uuid4()}",  # a direct invocation still stores a plan it can name
    )
    return _report(result, item, started)


def _report(result: sweep.SweepResult, item: SweepItem, started: datetime) -> dict[str, Any]:
    """Log and count the cluster step; what the state machine gets back."""
    if result.status != "processed":
        logger.error("sweep triage failed", cluster=item.cluster, error=result.error)
        fleet_metrics.emit_cluster_failed(item.cluster_name or item.cluster)
        return result.response()
    if result.health is not None:
        fleet_metrics.emit_health(result.health, step_seconds=(now() - started).total_seconds())
        fleet_metrics.log_problem_nodes(result.health, result.node_groups, result.node_checks)
    metrics.add_metric(name="SweepTransitions", unit=MetricUnit.Count, value=len(result.transitions))
    if result.plan is not None:
        metrics.add_metric(name="NodesPlannedForProbe", unit=MetricUnit.Count, value=len(result.plan.nodes))
        if result.plan.behind:
            metrics.add_metric(name="ProbeRotationBehind", unit=MetricUnit.Count, value=result.plan.behind)
        for note in result.plan.notes:
            logger.warning("probe rotation", cluster=result.cluster, note=note)
    response = result.response()
    logger.info(
        "cluster checks applied",
        cluster=result.cluster,
        transitions=response["transitions"],
        rotation=response["rotation"],
        summary=result.summary,
    )
    return response
