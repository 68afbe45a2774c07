"""The idempotent run of one triage signal (a HyperPod event, a health-agent log record), or of one window
of them, into the findings table; and the hand-over of a signal to its cluster's window. Used by the event,
log-subscription and window functions only, so the others do not import the triage.

The triage itself (and Powertools' idempotency) is loaded on the first run: with a window queue (the stack's
default) the event and log-subscription functions only hand signals over, and never load it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from functions.monitor.logic import signals, windows
from functions.monitor.logic.signals import kinds
from functions.monitor.runtime import now
from functions.monitor.window_store import TableWindows, WindowQueue
from functions.shared.clients import clients
from functions.shared.observability import logger, metrics
from hyperpod_debugger.store.findings import FindingStore
from hyperpod_debugger.store.incidents import IncidentStore

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from functions.shared.env import MonitorEnv
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.domain.model import TriageReport
    from hyperpod_debugger.triage import TriageRequest


def run_triage(req: TriageRequest, clients: AwsClients | None = None) -> TriageReport:
    """:func:`hyperpod_debugger.triage.run_triage`, the triage loaded when the first signal or window runs."""
    from hyperpod_debugger.triage import run_triage as triage

    return triage(req, clients)


def _triage(req: TriageRequest) -> TriageReport:
    return run_triage(req, clients(req.region))


def _run_signal(event: dict[str, Any], signal: signals.ClusterSignal, env: MonitorEnv) -> dict[str, Any]:
    transitions = signals.handle_cluster_event(
        signal,
        triage=_triage,
        store=FindingStore(clients(env.AWS_REGION), env.FINDINGS_TABLE, history_ttl=env.history_ttl),
        incidents=IncidentStore(clients(env.AWS_REGION), env.FINDINGS_TABLE, ttl=env.history_ttl),
        repair_grace=env.repair_grace,
        now=now(),
        probe=env.PROBE_ENABLED,
        probe_timeout=env.PROBE_TIMEOUT_S,
        documents=env.session_documents,
    )
    counted = kinds(transitions)
    metrics.add_metric(name="FindingTransitions", unit=MetricUnit.Count, value=sum(1 for t in transitions if t.notify))
    logger.info("triage applied", cluster_arn=signal.cluster_arn, node=signal.node, transitions=counted)
    return {
        "status": "processed",
        "event_id": signal.event_id,
        "cluster_arn": signal.cluster_arn,
        "node": signal.node,
        "transitions": counted,
    }


def _once_per_key(function: Callable[..., dict[str, Any]], key: str, env: MonitorEnv, context: LambdaContext) -> Any:
    """``function`` run once per value of ``event[key]`` (Powertools idempotency, in the idempotency table)."""
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function  # see above

    from functions.monitor.adapters import idempotency_store

    config = IdempotencyConfig(event_key_jmespath=key, expires_after_seconds=env.IDEMPOTENCY_TTL_S)
    config.register_lambda_context(context)
    return idempotent_function(
        function,
        data_keyword_argument="event",
        persistence_store=idempotency_store(env.IDEMPOTENCY_TABLE, env.AWS_REGION),
        config=config,
    )


def signal_runner(env: MonitorEnv, context: LambdaContext) -> Callable[[signals.ClusterSignal], dict[str, Any]]:
    """Run one signal's triage into the store, once per ``signal.event_id`` (a repeat returns the first
    run's result from the idempotency table)."""
    run = _once_per_key(_run_signal, "id", env, context)

    def once(signal: signals.ClusterSignal) -> dict[str, Any]:
        logger.info(
            "triage started",
            event_id=signal.event_id,
            cluster_arn=signal.cluster_arn,
            node=signal.node,
            reason=signal.reason,
            notes=list(signal.notes) or None,
        )
        return run(event={"id": signal.event_id}, signal=signal, env=env)

    return once


def coalesced(env: MonitorEnv) -> Callable[[signals.ClusterSignal], dict[str, Any]] | None:
    """Hand a signal to its cluster's window (kept, and the window opened when none is), or None when the
    stack coalesces nothing (no window queue): then each signal is triaged at once."""
    if not env.EVENT_WINDOW_QUEUE_URL:
        return None
    aws = clients(env.AWS_REGION)
    store = TableWindows(aws, env.FINDINGS_TABLE)
    queue = WindowQueue(aws, env.EVENT_WINDOW_QUEUE_URL)

    def hand_over(signal: signals.ClusterSignal) -> dict[str, Any]:
        result = windows.enqueue(
            signal,
            windows=store,
            queue=queue,
            now=now(),
            window_s=env.EVENT_WINDOW_S,
            lead_s=env.EVENT_WINDOW_LEAD_S,
        )
        logger.info(
            "event kept for its window",
            event_id=signal.event_id,
            cluster_arn=signal.cluster_arn,
            node=signal.node,
            reason=signal.reason,
            window=result.get("window"),
            due_at=result.get("due_at"),
            leading=result.get("leading"),
            notes=list(signal.notes) or None,
        )
        return result

    return hand_over


def _run_window(event: dict[str, Any], events: windows.WindowEvents, env: MonitorEnv) -> dict[str, Any]:
    transitions, summary = windows.handle_window(
        events,
        triage=_triage,
        store=FindingStore(clients(env.AWS_REGION), env.FINDINGS_TABLE, history_ttl=env.history_ttl),
        incidents=IncidentStore(clients(env.AWS_REGION), env.FINDINGS_TABLE, ttl=env.history_ttl),
        repair_grace=env.repair_grace,
        now=now(),
        probe=env.PROBE_ENABLED,
        probe_timeout=env.PROBE_TIMEOUT_S,
        documents=env.session_documents,
        max_nodes=env.EVENT_WINDOW_PROBE_MAX_NODES,
        rate=env.EVENT_WINDOW_PROBE_RATE,
    )
    counted = kinds(transitions)
    metrics.add_metric(name="FindingTransitions", unit=MetricUnit.Count, value=sum(1 for t in transitions if t.notify))
    metrics.add_metric(name="WindowEvents", unit=MetricUnit.Count, value=summary["events"])
    if summary["not_probed"]:  # not Running, or over the window's cap: the sweep probes them, suspects first
        metrics.add_metric(name="WindowNodesNotProbed", unit=MetricUnit.Count, value=len(summary["not_probed"]))
    logger.info("window triage applied", cluster_arn=events.signals[0].cluster_arn, transitions=counted, **summary)
    return {"transitions": counted, **summary}


def window_runner(env: MonitorEnv, context: LambdaContext) -> Callable[[windows.WindowEvents], dict[str, Any]]:
    """Run one window's triage into the store, once per set of events (a repeat delivery of the same window
    returns the first run's result)."""
    run = _once_per_key(_run_window, "key", env, context)

    def once(events: windows.WindowEvents) -> dict[str, Any]:
        key = events.idempotency_key(events.signals[0].cluster_arn)
        return run(event={"key": key}, events=events, env=env)

    return once


__all__ = ["coalesced", "run_triage", "signal_runner", "window_runner"]
