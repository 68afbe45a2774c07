"""One batch of the sweep's node probes (one item of the inner Map): probe exactly the nodes named,
write what changed for them, and remember when each was probed (the rotation's clock)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from functions.monitor import fleet_metrics
from functions.monitor.logic import sweep
from functions.monitor.runtime import now, validation_errors, with_env
from functions.shared.clients import clients
from functions.shared.env import sweep_env
from functions.shared.events import ProbeBatch, without_surrogates
from functions.shared.observability import logger, metrics, tracer
from hyperpod_debugger.aws.incident_store import IncidentStore
from hyperpod_debugger.aws.store import FindingStore
from hyperpod_debugger.lifecycle.findings import parse_iso
from hyperpod_debugger.probe.runner import PaceReport, ProbeOptions
from hyperpod_debugger.triage import run_probe_batch

START_SESSION = "ssm:StartSession"


@with_env(sweep_env)
@logger.inject_lambda_context(correlation_id_path="sweep_id", log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = sweep_env()
    paced: list[PaceReport] = []  # how the batch paced its StartSession calls (it yields while throttled)
    options = ProbeOptions(
        rate=env.START_SESSION_RATE, timeout=env.PROBE_TIMEOUT_S, documents=env.session_documents, on_pace=paced.append
    )
    aws = clients(env.AWS_REGION)
    store = FindingStore(aws, env.FINDINGS_TABLE, history_ttl=env.history_ttl)
    try:
        batch = ProbeBatch.model_validate(without_surrogates(event))  # a lone surrogate reads as U+FFFD
        nodes = batch.nodes
        if batch.batch is not None:
            stored = store.plan_batch(batch.cluster_arn, batch.sweep_id, batch.batch)
            if stored is None:
                error = f"no stored plan batch {batch.batch} of sweep {batch.sweep_id!r} (expired, or never written)"
                raise ValueError(error)
            nodes = stored["nodes"]
            # the batch runs as the cluster step scheduled it: its share of the rate, its slots, its round
            options = replace(
                options,
                rate=float(stored.get("rate") or options.rate),
                concurrency=int(stored.get("slots") or options.concurrency),
                start_until=parse_iso(stored["stop_at"]) if stored.get("stop_at") else None,
            )
        request = sweep.batch_request(batch.cluster_arn, nodes or [], region=env.AWS_REGION, now=now(), options=options)
    except ValidationError as exc:
        logger.error("probe batch rejected", errors=validation_errors(exc))
        return {"status": "rejected", "errors": validation_errors(exc)}
    except (ValueError, KeyError, TypeError) as exc:
        errors = [{"at": "nodes", "error": str(exc)}]
        logger.error("probe batch rejected", errors=errors)
        return {"status": "rejected", "errors": errors}
    calls, throttles = aws.calls[START_SESSION], aws.throttles[START_SESSION]
    result = sweep.probe_batch(
        request,
        probe=lambda req: run_probe_batch(req, aws),
        store=store,
        incidents=IncidentStore(aws, env.FINDINGS_TABLE, ttl=env.history_ttl),
        repair_grace=env.repair_grace,
    )
    fleet_metrics.emit_sessions(
        batch.cluster_name or batch.cluster_arn,
        aws.calls[START_SESSION] - calls,
        aws.throttles[START_SESSION] - throttles,
    )
    if result.status != "processed":
        logger.error("probe batch failed", cluster=batch.cluster_arn, error=result.error)
        return result.response()
    metrics.add_metric(name="NodesProbed", unit=MetricUnit.Count, value=len(result.probed))
    metrics.add_metric(name="SweepTransitions", unit=MetricUnit.Count, value=len(result.transitions))
    response = result.response()
    response["not_started"] = _say_pace(batch.cluster_name or batch.cluster_arn, paced[-1] if paced else None)
    logger.info(
        "probe batch applied",
        cluster=batch.cluster_name,
        planned=result.planned,
        probed=len(result.probed),
        transitions=response["transitions"],
    )
    return response


def _say_pace(cluster: str, pace: PaceReport | None) -> int:
    """Log and count what the batch left to the next sweep, and whether it slowed down for people's sessions.
    Returns how many nodes were not started."""
    if pace is None:
        return 0
    if pace.not_started:
        metrics.add_metric(name="ProbesNotStarted", unit=MetricUnit.Count, value=len(pace.not_started))
    if pace.yielded or pace.not_started:
        logger.warning(
            "probe batch yielded StartSession to people" if pace.yielded else "probe batch round closed",
            cluster=cluster,
            throttles=pace.throttles,
            rate=round(pace.ceiling, 3),
            lowest_rate=round(pace.lowest, 3),
            started=pace.started,
            not_started=list(pace.not_started),
            note="nodes not started are not probed: they stay due and lead the next sweep's plan (suspects first)",
        )
    return len(pace.not_started)
