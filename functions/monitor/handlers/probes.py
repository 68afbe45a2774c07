"""One batch of the sweep's node probes (one item of the inner Map): probe exactly the nodes named,
write what changed for them, and remember when each was probed (the rotation's clock;
:func:`functions.monitor.logic.batch.probe_batch`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from functions.monitor import fleet_metrics
from functions.monitor.logic import batch
from functions.monitor.runtime import now, validation_errors, with_env
from functions.shared.clients import clients
from functions.shared.env import SweepEnv, sweep_env
from functions.shared.observability import logger, metrics, tracer
from functions.shared.odd_input import without_surrogates
from functions.shared.sweep_items import ProbeBatch
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.probe_batch import ProbeBatchRequest, run_probe_batch
from hyperpod_debugger.store.findings import FindingStore
from hyperpod_debugger.store.incidents import IncidentStore

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from hyperpod_debugger.probe.pace import PaceReport

START_SESSION = "ssm:StartSession"


def _request(item: ProbeBatch, store: batch.SweepStore, env: SweepEnv, options: ProbeOptions) -> ProbeBatchRequest:
    """The probe request for the nodes the item names, or for the stored plan batch it names, run as the cluster
    step scheduled it. Raises ``ValueError`` (``KeyError``, ``TypeError``) for nodes that cannot be probed."""
    nodes = item.nodes or []
    if item.batch is not None:
        planned = batch.PlannedBatch.stored(store, item.cluster_arn, item.sweep_id, item.batch)
        nodes, options = planned.nodes, planned.options(options)
    return batch.batch_request(item.cluster_arn, nodes, region=env.AWS_REGION, now=now(), options=options)


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
    incidents = IncidentStore(aws, env.FINDINGS_TABLE, ttl=env.history_ttl)
    try:
        item = ProbeBatch.model_validate(without_surrogates(event))  # a lone surrogate reads as U+FFFD
        request = _request(item, store, env, options)
    except ValidationError as exc:
        logger.error("probe batch rejected", errors=validation_errors(exc))
        return {"status": "rejected", "errors": validation_errors(exc)}
    except (ValueError, KeyError, TypeError) as exc:
        errors = [{"at": "nodes", "error": str(exc)}]
        logger.error("probe batch rejected", errors=errors)
        return {"status": "rejected", "errors": errors}
    calls, throttles = aws.calls[START_SESSION], aws.throttles[START_SESSION]
    result = batch.probe_batch(
        request,
        probe=lambda request: run_probe_batch(request, aws),
        store=store,
        incidents=incidents,
        repair_grace=env.repair_grace,
    )
    cluster = item.cluster_name or item.cluster_arn
    fleet_metrics.emit_sessions(cluster, aws.calls[START_SESSION] - calls, aws.throttles[START_SESSION] - throttles)
    return _report(result, item, paced[-1] if paced else None)


def _report(result: batch.BatchResult, item: ProbeBatch, pace: PaceReport | None) -> dict[str, Any]:
    """Log and count the batch; what the state machine gets back."""
    if result.status != "processed":
        logger.error("probe batch failed", cluster=item.cluster_arn, error=result.error)
        return result.response()
    metrics.add_metric(name="NodesProbed", unit=MetricUnit.Count, value=len(result.probed))
    metrics.add_metric(name="SweepTransitions", unit=MetricUnit.Count, value=len(result.transitions))
    response = result.response()
    response["not_started"] = _say_pace(item.cluster_name or item.cluster_arn, pace)
    logger.info(
        "probe batch applied",
        cluster=item.cluster_name,
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
