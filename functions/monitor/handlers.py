"""Lambda entry points of the monitor: wire Powertools, parse, call one logic function, map the result.

* :func:`event_handler`: EventBridge (the three HyperPod detail-types) → a scoped triage into the
  findings store. Idempotent on the EventBridge event ``id`` (SageMaker may send one change twice).
* :func:`log_subscription`: a CloudWatch Logs subscription on a cluster's log group → one scoped triage
  per node with HMA detection records (Slurm clusters report most detections only there). Idempotent on
  a hash of the log group, stream and log event ids.
* :func:`sweep_cluster` / :func:`probe_batch`: the scheduled sweep's two steps (the state machine maps
  the first over clusters and the second over each cluster's probe batches): cluster checks and the
  rotation plan, then the probes of one batch. Every Running node is probed at least once a period.
* :func:`stream_notifier`: the findings table's DynamoDB stream → the outbox (SQS FIFO): each
  transition rendered for Slack and email; a damaged record is kept aside, never fails the batch.
* :func:`courier`: the outbox → Slack and SNS, one attempt per message per invocation; failures wait in
  the queue with backoff and hold back their group, refused messages go to the dead-letter queue.

Inputs no retry can fix (a malformed event, log payload or stream record) are kept, with the reason, in
the unprocessed-events queue, and counted.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    SqsFifoPartialProcessor,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from functions.monitor import hma_logs, logic
from functions.monitor.adapters import (
    AwsChannels,
    DeliveryLedger,
    SqsOutbox,
    dead_letter,
    idempotency_store,
    keep_unprocessed,
    ledger_clients,
)
from functions.shared.env import (
    MonitorEnv,
    NotifierEnv,
    SweepEnv,
    courier_env,
    monitor_env,
    notifier_env,
    sweep_env,
)
from functions.shared.events import ProbeBatch, parse_hyperpod_event
from functions.shared.observability import logger, metrics, tracer
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.aws.store import FindingStore, from_item, plain
from hyperpod_debugger.lifecycle.findings import Transition, plan_sweep
from hyperpod_debugger.lifecycle.rotation import node_of
from hyperpod_debugger.probe.runner import ProbeOptions
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
        documents=env.session_documents,
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
    options = ProbeOptions(
        max_nodes=0, rate=env.START_SESSION_RATE, timeout=env.PROBE_TIMEOUT_S, documents=env.session_documents
    )
    report, obs = triage_with_observation(
        TriageRequest(
            cluster=cluster_arn or cluster_name,
            region=env.AWS_REGION,
            now=now,
            probe=env.PROBE_ENABLED,
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
            report,
            obs,
            store.open_findings(arn),
            store.last_probed(arn),
            now,
            settings=_rotation(env),
            sweep_id=sweep_id,
        )
        rotation = plan.summary()
        metrics.add_metric(name="NodesPlannedForProbe", unit=MetricUnit.Count, value=len(plan.nodes))
        if plan.behind:
            metrics.add_metric(name="ProbeRotationBehind", unit=MetricUnit.Count, value=plan.behind)
        for note in plan.notes:
            logger.warning("probe rotation", cluster=report.cluster.name, note=note)
    logger.info(
        "cluster checks applied",
        cluster=report.cluster.name,
        transitions=kinds,
        rotation=rotation,
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
            probe_options=ProbeOptions(
                rate=env.START_SESSION_RATE, timeout=env.PROBE_TIMEOUT_S, documents=env.session_documents
            ),
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
    logger.info(
        "probe batch applied", cluster=batch.cluster_name, planned=len(nodes), probed=len(probed), transitions=kinds
    )
    return {
        "status": "processed",
        "cluster_arn": batch.cluster_arn,
        "planned": len(nodes),
        "probed": len(probed),
        "transitions": kinds,
    }


# --------------------------------------------------------------------------- stream notifier

# A batch whose every record failed is reported as such, not raised: the event source retries the same
# records either way, and an invocation error would only add noise to the Errors alarm.
_processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)


def _record_id(raw: Any) -> str:
    if not isinstance(raw, dict):
        return ""
    images = raw.get("dynamodb")
    sequence = images.get("SequenceNumber") if isinstance(images, dict) else None
    return str(sequence or "")


def _image(images: dict[str, Any], name: str) -> dict[str, Any] | None:
    value = images.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"{name} is a {type(value).__name__}, not a map")
    return plain(value) if value else None


def _changes(records: list[Any]) -> tuple[list[logic.StreamChange], dict[str, str], list[tuple[Any, str]]]:
    """The notifying transitions of a batch; the records that could not be read (id → reason); and
    the records without a sequence number, which cannot even be reported back as failed."""
    changes: list[logic.StreamChange] = []
    unreadable: dict[str, str] = {}
    orphans: list[tuple[Any, str]] = []
    for raw in records:
        rid = _record_id(raw)
        if not rid:
            orphans.append((raw, "the record has no dynamodb.SequenceNumber"))
            continue
        try:
            images = raw["dynamodb"]
            change = logic.change_of(rid, _image(images, "NewImage"), _image(images, "OldImage"), from_item)
        except Exception as exc:  # noqa: BLE001 - one damaged record is kept aside; it never fails the batch
            unreadable[rid] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        if change is not None:
            changes.append(change)
    return changes, unreadable, orphans


def _keep_unreadable(
    env: NotifierEnv, records: list[Any], unreadable: dict[str, str], orphans: list[tuple[Any, str]]
) -> set[str]:
    """Keep damaged records in the unprocessed queue; returns the ids that could not be kept (those fail
    and are retried by the stream, so nothing is lost either way)."""
    by_id = {_record_id(r): r for r in records if _record_id(r)}
    failed: set[str] = set()
    items = [(by_id[rid], reason, rid) for rid, reason in unreadable.items()] + [(r, why, "") for r, why in orphans]
    for raw, reason, rid in items:
        metrics.add_metric(name="StreamRecordsUnreadable", unit=MetricUnit.Count, value=1)
        try:
            kept = keep_unprocessed(
                env.UNPROCESSED_QUEUE_URL,
                env.AWS_REGION,
                raw,
                kind="stream record",
                errors=[{"at": "record", "error": reason}],
            )
        except RuntimeError as exc:
            logger.error("stream record unreadable and not kept", record=rid or None, reason=reason, error=str(exc))
            if rid:
                failed.add(rid)
            continue
        logger.error(
            "stream record unreadable: kept for inspection" if kept else "stream record unreadable",
            record=rid or None,
            reason=reason,
        )
    return failed


def _enqueue(env: NotifierEnv, deliveries: list[logic.Delivery], ledger: logic.Ledger) -> set[str]:
    """Render every delivery and queue one message per channel in the outbox, in stream order.

    Once a message of a cluster could not be queued, the later deliveries of that cluster are not
    queued either (their records fail with it), so the outbox never holds a later transition of a
    finding without the earlier one. Returns the record ids that failed.
    """
    outbox = SqsOutbox(AwsClients(env.AWS_REGION), env.OUTBOX_QUEUE_URL)
    failed: set[str] = set()
    held: set[str] = set()
    now = _now()
    for delivery in deliveries:
        cluster = delivery.changes[0].finding.cluster_arn
        if cluster in held:
            failed.update(delivery.record_ids)
            continue
        message = logic.render(delivery, region=env.AWS_REGION, runbook_base_url=env.RUNBOOK_BASE_URL)
        try:
            for item in logic.outbox_messages(delivery, message, channels=env.channels, now=now):
                if ledger.done(f"queued#{item.id}"):
                    continue
                outbox.put(item)
                ledger.mark([f"queued#{item.id}"])
        except logic.ChannelError as exc:
            held.add(cluster)
            failed.update(delivery.record_ids)
            metrics.add_metric(name="OutboxPutFailures", unit=MetricUnit.Count, value=1)
            logger.warning(
                "outbox refused a message: its cluster's later records wait", delivery=delivery.key, error=str(exc)
            )
            continue
        metrics.add_metric(name="OutboxMessages", unit=MetricUnit.Count, value=len(env.channels))
    return failed


@with_env(notifier_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def stream_notifier(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The findings table's stream → the outbox: each transition rendered for Slack and email.

    A record that cannot be read is kept aside and never fails the batch; a record whose message the
    outbox refused fails (with the later records of its cluster) and is retried by the stream.
    """
    env = notifier_env()
    raw_records = event.get("Records") if isinstance(event, dict) else None
    records = list(raw_records) if isinstance(raw_records, list) else []
    metrics.add_metric(name="StreamRecords", unit=MetricUnit.Count, value=len(records))
    changes, unreadable, orphans = _changes(records)
    failed = _keep_unreadable(env, records, unreadable, orphans)
    deliveries = logic.plan_deliveries(
        changes, digest_threshold=env.DIGEST_THRESHOLD, breaker_threshold=env.BREAKER_THRESHOLD
    )
    ledger: logic.Ledger = logic.NoLedger()
    if env.IDEMPOTENCY_TABLE:
        ledger = DeliveryLedger(ledger_clients(env.AWS_REGION), env.IDEMPOTENCY_TABLE, deadline=_deadline(context))
        ledger.load([f"queued#{m}" for d in deliveries for m in _message_ids(d, env.channels)])
    failed |= _enqueue(env, deliveries, ledger)
    well_formed = [r for r in records if _record_id(r)]

    def record_handler(record: DynamoDBRecord) -> None:
        rid = _record_id(record.raw_event)
        if rid in failed:
            raise RuntimeError(f"stream record {rid} was not queued; the stream retries it")

    response = process_partial_response(
        event={"Records": well_formed}, record_handler=record_handler, processor=_processor, context=context
    )
    if isinstance(ledger, DeliveryLedger) and ledger.errors:
        # Not fatal: at worst a retried record is queued again (the outbox's deduplication still holds).
        logger.warning("delivery ledger unavailable", errors=ledger.errors[:5])
    logger.info("transitions queued", deliveries=len(deliveries), failed=len(failed), unreadable=len(unreadable))
    return response


def _message_ids(delivery: logic.Delivery, channels: tuple[str, ...]) -> list[str]:
    return [logic.message_id(c, delivery.record_ids) for c in logic.CHANNELS if c in channels]


def _deadline(context: Any, margin_s: float = 10.0) -> float | None:
    """A monotonic time a little before the invocation's end, or None when the context cannot say."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    return time.monotonic() + max(remaining() / 1000 - margin_s, 0.0)


# --------------------------------------------------------------------------- courier

_courier_processor = SqsFifoPartialProcessor(skip_group_on_error=True)
_courier_processor.raise_on_entire_batch_failure = False  # see _processor
#: What one delivery attempt may take beyond the Slack timeout (the SNS call, the ledger), in seconds.
SEND_MARGIN_S = 3.0


class _NotAttempted(Exception):
    """Not tried in this invocation (no time left, or its channel is down right now): retried later."""


@with_env(courier_env)
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@tracer.capture_lambda_handler(capture_response=False)
def courier(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The outbox (SQS FIFO) → Slack and SNS: one attempt per message per invocation.

    * A message already sent (the ledger says so) is not sent again.
    * A failure keeps the message in the queue for a backoff (Slack's Retry-After, else doubling up
      to ``RETRY_CAP_S``) and holds back the later messages of its group (channel and cluster); after
      the queue's receive limit it moves, whole, to the dead-letter queue.
    * A message the channel refuses as such (a 4xx from Slack, an invalid SNS message) goes to the
      dead-letter queue at once, so it does not hold back its group.
    * Once a channel failed in this invocation, its other messages wait without being tried, and no
      message is tried without time for it: unsent messages are reported before the timeout.
    """
    env = courier_env()
    clients = AwsClients(env.AWS_REGION)
    channels = AwsChannels(
        clients,
        secret_name=env.SLACK_SECRET_NAME,
        topic_arn=env.ALERT_TOPIC_ARN,
        slack_attempts=1,
        slack_timeout=env.SLACK_TIMEOUT_S,
    )
    outbox = SqsOutbox(clients, env.OUTBOX_QUEUE_URL)
    records = [r for r in (event.get("Records") or []) if isinstance(r, dict)] if isinstance(event, dict) else []
    parsed: dict[str, logic.OutboxMessage | str] = {}
    for raw in records:
        try:
            parsed[str(raw.get("messageId"))] = logic.OutboxMessage.from_json(str(raw.get("body")))
        except ValueError as exc:
            parsed[str(raw.get("messageId"))] = str(exc)
    ledger: logic.Ledger = logic.NoLedger()
    if env.IDEMPOTENCY_TABLE:
        ledger = DeliveryLedger(ledger_clients(env.AWS_REGION), env.IDEMPOTENCY_TABLE, deadline=_deadline(context))
        ledger.load([f"sent#{m.id}" for m in parsed.values() if isinstance(m, logic.OutboxMessage)])
    down: dict[str, str] = {}
    #: message group -> the backoff its first failed message got; the messages held back behind it
    #: wait as long, so the group comes back whole (a FIFO group is blocked while any of it is in flight)
    group_delay: dict[str, int] = {}
    backed_off: set[str] = set()

    def retry_later(record: SQSRecord, retry_after: float | None) -> None:
        delay = logic.retry_delay(
            int(record.attributes.approximate_receive_count or 1),
            retry_after,
            base=env.RETRY_BASE_S,
            cap=env.RETRY_CAP_S,
        )
        outbox.backoff(record.receipt_handle, delay)
        backed_off.add(record.message_id)
        group = record.attributes.message_group_id or ""
        group_delay[group] = max(group_delay.get(group, 0), delay)

    def record_handler(record: SQSRecord) -> None:
        item = parsed.get(record.message_id)
        if not isinstance(item, logic.OutboxMessage):
            reason = f"not an outbox message: {item}"
            dead_letter(
                clients,
                env.OUTBOX_DLQ_URL,
                record.body,
                group=record.attributes.message_group_id or "-",
                dedup=record.message_id,
                reason=reason,
            )
            metrics.add_metric(name="OutboxDeadLettered", unit=MetricUnit.Count, value=1)
            logger.error(
                "outbox message unreadable: moved to the dead-letter queue", message_id=record.message_id, reason=reason
            )
            return
        if ledger.done(f"sent#{item.id}"):
            return
        if item.channel in down:
            retry_later(record, None)
            raise _NotAttempted(f"{item.channel} failed earlier in this invocation: {down[item.channel]}")
        if context.get_remaining_time_in_millis() / 1000 < env.SLACK_TIMEOUT_S + SEND_MARGIN_S:
            raise _NotAttempted("not enough time left in this invocation")
        try:
            logic.send(item, channels)
        except logic.ChannelError as exc:
            if exc.permanent:
                dead_letter(
                    clients,
                    env.OUTBOX_DLQ_URL,
                    record.body,
                    group=record.attributes.message_group_id or item.group,
                    dedup=item.id,
                    reason=str(exc),
                )
                metrics.add_metric(name="OutboxDeadLettered", unit=MetricUnit.Count, value=1)
                logger.error(
                    "message refused by its channel: moved to the dead-letter queue",
                    delivery=item.key,
                    channel=item.channel,
                    error=str(exc),
                )
                return
            down[item.channel] = str(exc)
            retry_later(record, exc.retry_after)
            metrics.add_metric(name="NotificationFailures", unit=MetricUnit.Count, value=1)
            logger.warning(
                "notification failed: retried later",
                delivery=item.key,
                channel=item.channel,
                error=str(exc),
                receive_count=record.attributes.approximate_receive_count,
            )
            raise
        ledger.mark([f"sent#{item.id}"])
        metrics.add_metric(name=f"Notifications{item.kind.title()}", unit=MetricUnit.Count, value=1)
        logger.info(
            "notification sent", delivery=item.key, kind=item.kind, channel=item.channel, records=len(item.records)
        )

    response = process_partial_response(
        event={"Records": records}, record_handler=record_handler, processor=_courier_processor, context=context
    )
    failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
    for raw in records:
        message_id, group = str(raw.get("messageId")), str((raw.get("attributes") or {}).get("MessageGroupId") or "")
        if message_id in failed and message_id not in backed_off and group in group_delay:
            outbox.backoff(str(raw.get("receiptHandle")), group_delay[group])
    if isinstance(ledger, DeliveryLedger) and ledger.errors:
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
