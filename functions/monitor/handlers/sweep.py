"""The sweep's cluster step (one item of the state machine's outer Map): the cluster's API checks and,
on Slurm, the controller's view into the store, then this sweep's node probes as batches for the
inner Map."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from functions.monitor import fleet_metrics
from functions.monitor.logic import sweep
from functions.monitor.runtime import now, validation_errors, with_env
from functions.shared.clients import clients
from functions.shared.env import sweep_env
from functions.shared.events import SweepItem, without_surrogates
from functions.shared.observability import logger, metrics, tracer
from hyperpod_debugger.aws.incident_store import IncidentStore
from hyperpod_debugger.aws.store import FindingStore
from hyperpod_debugger.lifecycle import budget
from hyperpod_debugger.probe.runner import ProbeOptions
from hyperpod_debugger.triage import TriageRequest, triage_with_observation


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
    sweep_id = item.sweep_id or f"manual-{uuid.uuid4()}"  # a direct invocation still stores a plan it can name
    if not env.allows(item.cluster_name, item.cluster_arn):
        return {
            "status": "skipped",
            "cluster": item.cluster,
            "reason": "not in CLUSTER_ALLOWLIST",
            "batches": [],
            "concurrency": 1,
        }
    aws = clients(env.AWS_REGION)
    started = now()
    began = item.sweep_started or started

    def settings_at(planned: datetime) -> sweep.RotationSettings:
        """This cluster's share of the StartSession budget in this sweep, taken when its checks are done:
        the rounds run from then to shortly before the next sweep."""
        share = budget.share(
            env.START_SESSION_RATE,
            clusters=item.clusters,
            cluster_concurrency=env.SWEEP_CLUSTER_CONCURRENCY,
            interval_s=env.SWEEP_INTERVAL_S,
            elapsed_s=(planned - began).total_seconds(),
            probe_timeout_s=env.PROBE_TIMEOUT_S,
        )
        return sweep.settings_for(
            share,
            interval=timedelta(seconds=env.SWEEP_INTERVAL_S),
            period=timedelta(seconds=env.PROBE_PERIOD_S),
            began=began,
            max_nodes=env.PROBE_MAX_NODES,
            max_batch=env.PROBE_BATCH_SIZE,
        )

    # max_nodes=0: on Slurm the controller is still read through a session; node probes come in batches.
    options = ProbeOptions(
        max_nodes=0, rate=env.START_SESSION_RATE, timeout=env.PROBE_TIMEOUT_S, documents=env.session_documents
    )
    request = TriageRequest(
        cluster=item.cluster, region=env.AWS_REGION, now=started, probe=env.PROBE_ENABLED, probe_options=options
    )
    result = sweep.sweep_cluster(
        request,
        triage=lambda req: triage_with_observation(req, aws),
        store=FindingStore(aws, env.FINDINGS_TABLE, history_ttl=env.history_ttl),
        incidents=IncidentStore(aws, env.FINDINGS_TABLE, ttl=env.history_ttl),
        repair_grace=env.repair_grace,
        settings=settings_at if env.PROBE_ENABLED else None,
        clock=now,
        sweep_id=sweep_id,
    )
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
