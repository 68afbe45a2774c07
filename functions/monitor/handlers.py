"""Lambda entry points of the monitor: wire Powertools, parse, call one logic function, map the result.

* :func:`event_handler`: EventBridge (the three HyperPod detail-types) → a scoped triage into the
  findings store. Idempotent on the EventBridge event ``id`` (SageMaker may send one change twice).
* :func:`log_subscription`: a CloudWatch Logs subscription on a cluster's log group → one scoped triage
  per node with HMA detection records (Slurm clusters report most detections only there). Idempotent on
  a hash of the log group, stream and log event ids.
* :func:`sweep_cluster` / :func:`probe_batch`: the scheduled sweep's two steps (the state machine maps
  the first over clusters and the second over each cluster's probe batches): cluster checks and the
  rotation plan, then the probes of one batch. Every Running node is probed at least once a period.
* :func:`stream_notifier`: the findings table's DynamoDB stream → Slack and SNS email, on transitions
  only, with a partial batch response so one failed delivery fails only its own records.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from functions.monitor import hma_logs, logic
from functions.monitor.adapters import AwsChannels, DeliveryLedger, idempotency_store, keep_unprocessed
from functions.shared.env import MonitorEnv, SweepEnv, monitor_env, notifier_env, sweep_env
from functions.shared.events import ProbeBatch, parse_hyperpod_event
from functions.shared.observability import logger, metrics, tracer
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.store import FindingStore, from_item, plain
from hyperpod_debugger.probe.runner import ProbeOptions
from hyperpod_debugger.rotation import node_of
from hyperpod_debugger.store_logic import Transition, plan_sweep
from hyperpod_debugger.triage import (
    ProbeBatchRequest,
    TriageRequest,
    run_probe_batch,
    run_triage,
    triage_with_observation,
)

F = TypeVar("F", bound=Callable[..., Any])


def with_env(getter: Callable[[], Any]) -> Callable[[F], F]:
    """Validate the function's environment before anything else runs (a bad deploy fails loudly)."""

    def wrap(handler: F) -> F:
        @functools.wraps(handler)
        def checked(event: Any, context: Any) -> Any:
            getter()
            return handler(event, context)

        return checked  # type: ignore[return-value]

    return wrap


def _now() -> datetime:
    return datetime.now(UTC)


def _kinds(transitions: list[Transition]) -> dict[str, int]:
    """Transitions counted by kind, for the log line and the response."""
    return dict(Counter(t.kind.value for t in transitions))


# --------------------------------------------------------------------------- event handler


def _validation_errors(exc: ValidationError) -> list[dict[str, str]]:
    # No input values: an event may carry tags or messages we do not want copied into logs.
    return [{"at": ".".join(str(p) for p in err["loc"]), "error": err["msg"]} for err in exc.errors()[:10]]


def _run_signal(event: dict[str, Any], signal: logic.ClusterSignal, env: MonitorEnv) -> dict[str, Any]:
    def triage(req: TriageRequest) -> Any:
        return run_triage(req, AwsClients(req.region))

    store = FindingStore(AwsClients(env.AWS_REGION), env.FINDINGS_TABLE)
    transitions = logic.handle_cluster_event(
        signal,
        triage=triage,
        store=store,
        now=_now(),
        probe=env.PROBE_ENABLED,
        probe_timeout=env.PROBE_TIMEOUT_S,
    )
    kinds = _kinds(transitions)
    notifying = sum(1 for t in transitions if t.notify)
    metrics.add_metric(name="FindingTransitions", unit=MetricUnit.Count, value=notifying)
    logger.info("triage applied", cluster_arn=signal.cluster_arn, node=signal.node, transitions=kinds)
    return {
        "status": "processed",
        "event_id": signal.event_id,
        "cluster_arn": signal.cluster_arn,
        "node": signal.node,
        "transitions": kinds,
    }


def _idempotent_signal_runner(env: MonitorEnv, context: LambdaContext) -> Callable[..., dict[str, Any]]:
    """:func:`_run_signal`, run once per ``event["id"]`` (a repeat returns the first run's result)."""
    config = IdempotencyConfig(event_key_jmespath="id", expires_after_seconds=env.IDEMPOTENCY_TTL_S)
    config.register_lambda_context(context)
    return idempotent_function(
        _run_signal,
        data_keyword_argument="event",
        persistence_store=idempotency_store(env.IDEMPOTENCY_TABLE, env.AWS_REGION),
        config=config,
    )


def _reject(
    event: Any, errors: list[dict[str, str]], env: MonitorEnv, *, kind: str, metric: str = "EventsRejected"
) -> dict[str, Any]:
    """An input that no retry can fix: logged with its id, counted, and kept in the unprocessed-events
    queue with the reason (raises when it cannot be kept, so Lambda's retries and on-failure
    destination keep it instead)."""
    detail_type = event.get("detail-type") if isinstance(event, dict) else None
    event_id = event.get("id") if isinstance(event, dict) else None
    kept = keep_unprocessed(env.UNPROCESSED_QUEUE_URL, env.AWS_REGION, event, kind=kind, errors=errors)
    logger.error(
        f"{kind} rejected: kept for inspection" if kept else f"{kind} rejected (no queue to keep it in)",
        event_id=event_id,
        detail_type=detail_type,
        errors=errors,
    )
    metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    return {"status": "rejected", "event_id": event_id, "detail_type": detail_type, "errors": errors, "kept": kept}


@with_env(monitor_env)
@logger.inject_lambda_context(correlation_id_path="id", log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def event_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = monitor_env()
    metrics.add_metric(name="EventsReceived", unit=MetricUnit.Count, value=1)
    try:
        parsed = parse_hyperpod_event(event)
        signal = logic.signal_of(parsed)
    except ValidationError as exc:
        # Retrying cannot fix a malformed event: keep it with the reason instead of raising.
        return _reject(event, _validation_errors(exc), env, kind="event")
    except logic.UnusableEvent as exc:
        return _reject(event, [{"at": "detail", "error": str(exc)}], env, kind="event")
    if signal is None:
        logger.info("cluster event ignored: informational", event_id=parsed.id, detail_type=parsed.detail_type)
        return {"status": "ignored", "event_id": parsed.id}
    run = _idempotent_signal_runner(env, context)
    logger.info(
        "triage started",
        event_id=signal.event_id,
        cluster_arn=signal.cluster_arn,
        node=signal.node,
        reason=signal.reason,
        notes=list(signal.notes) or None,
    )
    return run(event=event, signal=signal, env=env)


# --------------------------------------------------------------------------- sweep


def _rotation(env: SweepEnv) -> logic.RotationSettings:
    return logic.RotationSettings(
        interval=timedelta(seconds=env.SWEEP_INTERVAL_S),
        period=timedelta(seconds=env.PROBE_PERIOD_S),
        cap=env.PROBE_MAX_NODES,
        batch_size=env.PROBE_BATCH_SIZE,
    )


@with_env(sweep_env)
@logger.inject_lambda_context(correlation_id_path="sweep_id", log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def sweep_cluster(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The sweep's cluster step: the cluster's API checks (and, on Slurm, the controller's view) into the
    store, then the plan of this sweep's node probes as batches for the state machine's inner Map."""
    env = sweep_env()
    if not isinstance(event, dict):
        logger.error("sweep input is not an object", input_type=type(event).__name__)
        return {"status": "rejected", "reason": "the sweep input is not an object", "batches": []}
    cluster_arn = str(event.get("cluster_arn") or "")
    cluster_name = str(event.get("cluster_name") or "")
    sweep_id = str(event.get("sweep_id") or "")
    if not (cluster_arn or cluster_name):
        logger.error("sweep input names no cluster", keys=sorted(event))
        return {"status": "rejected", "reason": "the sweep input names no cluster", "batches": []}
    if not env.allows(cluster_name, cluster_arn):
        return {
            "status": "skipped",
            "cluster": cluster_name or cluster_arn,
            "reason": "not in CLUSTER_ALLOWLIST",
            "batches": [],
        }
    now = _now()
    clients = AwsClients(env.AWS_REGION)
    # max_nodes=0: on Slurm the controller is still read through a session; node probes come in batches.
    options = ProbeOptions(max_nodes=0, rate=env.START_SESSION_RATE, timeout=env.PROBE_TIMEOUT_S)
    report, obs = triage_with_observation(
        TriageRequest(
            cluster=cluster_arn or cluster_name, region=env.AWS_REGION, now=now, probe=env.PROBE_ENABLED,
            probe_options=options,
        ),
        clients,
    )
    if report.error is not None or obs is None:
        message = report.error.message if report.error else "the cluster could not be read"
        logger.error("sweep triage failed", cluster=cluster_name or cluster_arn, error=message)
        return {"status": "error", "cluster": cluster_name or cluster_arn, "error": message, "batches": []}
    arn = report.cluster.arn or cluster_arn
    store = FindingStore(clients, env.FINDINGS_TABLE)
    # The cluster step reads the whole node list: findings of nodes that left the cluster resolve here.
    present = frozenset(n.instance_id for n in obs.nodes.value or ()) if obs.nodes.available else None
    transitions = store.apply(plan_sweep(store.open_findings(arn), report, now, nodes_present=present), now)
    kinds = _kinds(transitions)
    metrics.add_metric(name="SweepTransitions", unit=MetricUnit.Count, value=len(transitions))
    batches: list[dict[str, Any]] = []
    rotation: dict[str, int] | None = None
    if env.PROBE_ENABLED:
        plan, batches = logic.plan_probe_batches(
            report, obs, store.open_findings(arn), store.last_probed(arn), now,
            settings=_rotation(env), sweep_id=sweep_id,
        )
        rotation = plan.summary()
        metrics.add_metric(name="NodesPlannedForProbe", unit=MetricUnit.Count, value=len(plan.nodes))
        if plan.behind:
            metrics.add_metric(name="ProbeRotationBehind", unit=MetricUnit.Count, value=plan.behind)
        for note in plan.notes:
            logger.warning("probe rotation", cluster=report.cluster.name, note=note)
    logger.info(
        "cluster checks applied", cluster=report.cluster.name, transitions=kinds, rotation=rotation,
        summary=report.summary.model_dump(),
    )
    return {
        "status": "processed",
        "cluster": report.cluster.name,
        "cluster_arn": arn,
        "transitions": kinds,
        "rotation": rotation,
        "batches": batches,
    }


@with_env(sweep_env)
@logger.inject_lambda_context(correlation_id_path="sweep_id", log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def probe_batch(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One batch of the sweep's node probes: probe exactly the nodes named, write what changed for
    them, and remember when each was probed (the rotation's clock)."""
    env = sweep_env()
    try:
        batch = ProbeBatch.model_validate(event)
        nodes = tuple(node_of(d) for d in batch.nodes)
    except (ValidationError, ValueError) as exc:
        reason = _validation_errors(exc) if isinstance(exc, ValidationError) else [{"at": "nodes", "error": str(exc)}]
        logger.error("probe batch rejected", errors=reason)
        return {"status": "rejected", "errors": reason}
    now = _now()
    clients = AwsClients(env.AWS_REGION)
    report = run_probe_batch(
        ProbeBatchRequest(
            cluster=batch.cluster_arn,
            region=env.AWS_REGION,
            nodes=nodes,
            controllers=frozenset(d["instance_id"] for d in batch.nodes if d.get("role") == "controller"),
            recovering={d["instance_id"]: str(d["recovering"]) for d in batch.nodes if d.get("recovering")},
            now=now,
            probe_options=ProbeOptions(rate=env.START_SESSION_RATE, timeout=env.PROBE_TIMEOUT_S),
        ),
        clients,
    )
    if report.error is not None:
        logger.error("probe batch failed", cluster=batch.cluster_arn, error=report.error.message)
        return {"status": "error", "cluster_arn": batch.cluster_arn, "error": report.error.message}
    store = FindingStore(clients, env.FINDINGS_TABLE)
    transitions = store.apply(plan_sweep(store.open_findings(batch.cluster_arn), report, now), now)
    probed = list(report.coverage.probed_nodes or [])
    store.record_probed(batch.cluster_arn, probed, now)
    kinds = _kinds(transitions)
    metrics.add_metric(name="NodesProbed", unit=MetricUnit.Count, value=len(probed))
    metrics.add_metric(name="SweepTransitions", unit=MetricUnit.Count, value=len(transitions))
    logger.info("probe batch applied", cluster=batch.cluster_name, planned=len(nodes), probed=len(probed),
                transitions=kinds)
    return {
        "status": "processed",
        "cluster_arn": batch.cluster_arn,
        "planned": len(nodes),
        "probed": len(probed),
        "transitions": kinds,
    }


# --------------------------------------------------------------------------- stream notifier

_processor = BatchProcessor(event_type=EventType.DynamoDBStreams)


def _record_id(raw: dict[str, Any]) -> str:
    return str((raw.get("dynamodb") or {}).get("SequenceNumber") or raw.get("eventID") or "")


def _changes(records: list[dict[str, Any]]) -> tuple[list[logic.StreamChange], dict[str, str]]:
    """The notifying transitions of a batch, and the records that could not be read (id → reason)."""
    changes: list[logic.StreamChange] = []
    unreadable: dict[str, str] = {}
    for raw in records:
        rid = _record_id(raw)
        images = raw.get("dynamodb") or {}
        try:
            new = plain(images["NewImage"]) if images.get("NewImage") else None
            old = plain(images["OldImage"]) if images.get("OldImage") else None
            change = logic.change_of(rid, new, old, from_item)
        except (KeyError, TypeError, ValueError) as exc:
            unreadable[rid] = type(exc).__name__
            continue
        if change is not None:
            changes.append(change)
    return changes, unreadable


@with_env(notifier_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def stream_notifier(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    env = notifier_env()
    records = list(event.get("Records") or [])
    metrics.add_metric(name="StreamRecords", unit=MetricUnit.Count, value=len(records))
    changes, unreadable = _changes(records)
    deliveries = logic.plan_deliveries(
        changes, digest_threshold=env.DIGEST_THRESHOLD, breaker_threshold=env.BREAKER_THRESHOLD
    )
    by_record = {rid: d for d in deliveries for rid in d.record_ids}
    channels = AwsChannels(
        AwsClients(env.AWS_REGION),
        secret_name=env.SLACK_SECRET_NAME,
        topic_arn=env.ALERT_TOPIC_ARN,
        slack_attempts=env.SLACK_ATTEMPTS,
        slack_timeout=env.SLACK_TIMEOUT_S,
    )
    ledger: logic.Ledger = logic.NoLedger()
    if env.IDEMPOTENCY_TABLE:
        ledger = DeliveryLedger(AwsClients(env.AWS_REGION), env.IDEMPOTENCY_TABLE)
        ledger.load([rid for d in deliveries for rid in d.record_ids])
    outcome: dict[str, logic.DeliveryFailed | None] = {}

    def record_handler(record: DynamoDBRecord) -> None:
        rid = _record_id(record.raw_event)
        if rid in unreadable:
            raise ValueError(f"stream record {rid} could not be read ({unreadable[rid]})")
        delivery = by_record.get(rid)
        if delivery is None:
            return  # a heartbeat, history or sweep item: nothing to tell anyone
        if delivery.key not in outcome:
            message = logic.render(delivery, region=env.AWS_REGION, runbook_base_url=env.RUNBOOK_BASE_URL)
            try:
                used = logic.deliver(delivery, message, channels, ledger)
                outcome[delivery.key] = None
                metrics.add_metric(name=f"Notifications{delivery.kind.title()}", unit=MetricUnit.Count, value=1)
                logger.info(
                    "notification sent",
                    delivery=delivery.key,
                    kind=delivery.kind,
                    records=len(delivery.changes),
                    channels=used,
                )
            except logic.DeliveryFailed as exc:
                outcome[delivery.key] = exc
                metrics.add_metric(name="NotificationFailures", unit=MetricUnit.Count, value=1)
                logger.warning("notification failed", delivery=delivery.key, failures=exc.failures)
        failed = outcome[delivery.key]
        if failed is not None:
            raise failed

    response = process_partial_response(
        event=event, record_handler=record_handler, processor=_processor, context=context
    )
    if isinstance(ledger, DeliveryLedger) and ledger.errors:
        # Not fatal: at worst a retried record is sent again on a channel that already carried it.
        logger.warning("delivery ledger unavailable", errors=ledger.errors[:5])
    return response


# --------------------------------------------------------------------------- HMA log subscription


def _triage_nodes(
    signals: tuple[logic.ClusterSignal, ...], env: MonitorEnv, context: LambdaContext
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Each signal through the event handler's idempotent path, keyed on the signal's event id."""
    run = _idempotent_signal_runner(env, context)
    nodes: list[dict[str, Any]] = []
    totals: Counter[str] = Counter()
    for signal in signals:
        logger.info(
            "triage started",
            event_id=signal.event_id,
            cluster_arn=signal.cluster_arn,
            node=signal.node,
            reason=signal.reason,
        )
        result = run(event={"id": signal.event_id}, signal=signal, env=env)
        kinds = dict(result.get("transitions") or {})
        totals.update(kinds)
        nodes.append({"node": signal.node, "event_id": signal.event_id, "reason": signal.reason, "transitions": kinds})
    return nodes, totals


@with_env(monitor_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def log_subscription(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """HMA detection records from a cluster log group's subscription filter → scoped node triages.

    A payload that cannot be read is rejected (logged, counted) rather than raised: the retry Lambda
    would make carries the same bytes. A failed triage does raise, so the retry redoes only the nodes
    whose idempotency record did not complete. Nodes past ``LOG_MAX_NODES`` are deferred to the sweep.
    """
    env = monitor_env()
    metrics.add_metric(name="LogPayloadsReceived", unit=MetricUnit.Count, value=1)
    partition = hma_logs.partition_of(getattr(context, "invoked_function_arn", None))
    try:
        batch = hma_logs.read_subscription(event, region=env.AWS_REGION, partition=partition)
    except hma_logs.LogPayloadError as exc:
        errors = [{"at": "payload", "error": str(exc)}]
        rejected = _reject(event, errors, env, kind="log payload", metric="LogPayloadsRejected")
        return {**rejected, "error": str(exc)}
    if batch is None:
        logger.info("log subscription control message ignored")
        return {"status": "ignored", "reason": "control message"}
    where = {"cluster": batch.cluster.name, "cluster_arn": batch.cluster_arn}
    if not env.allows(batch.cluster.name, batch.cluster_arn):
        logger.warning("log payload of a cluster outside CLUSTER_ALLOWLIST skipped", **where)
        return {"status": "skipped", **where, "reason": "not in CLUSTER_ALLOWLIST"}
    if batch.unattributed:
        logger.warning(
            "HMA detections on a stream naming no instance id",
            count=batch.unattributed,
            log_stream=ascii(batch.log_stream[:200]),
        )
    taken, deferred = batch.signals[: env.LOG_MAX_NODES], batch.signals[env.LOG_MAX_NODES :]
    if deferred:
        logger.warning("nodes deferred to the sweep", deferred=[s.node for s in deferred], limit=env.LOG_MAX_NODES)
        metrics.add_metric(name="LogNodesDeferred", unit=MetricUnit.Count, value=len(deferred))
    if not taken:
        logger.info("log payload holds nothing to triage", reason=batch.dropped, **where)
    nodes, totals = _triage_nodes(taken, env, context) if taken else ([], Counter())
    metrics.add_metric(name="HmaDetections", unit=MetricUnit.Count, value=batch.detections)
    return {
        "status": "processed",
        **where,
        "nodes": nodes,
        "deferred": [s.node for s in deferred],
        "transitions": dict(totals),
        **({"dropped": batch.dropped} if batch.dropped else {}),
    }
