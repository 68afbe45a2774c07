"""The idempotent run of one triage signal (a HyperPod event, a health-agent log record) into the findings
table: used by the event and log-subscription functions only, so the others do not import the triage."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.monitor.adapters import idempotency_store
from functions.monitor.logic import signals
from functions.monitor.logic.sweep import kinds
from functions.monitor.runtime import now
from functions.shared.clients import clients
from functions.shared.env import MonitorEnv
from functions.shared.observability import logger, metrics
from hyperpod_debugger.aws.store import FindingStore
from hyperpod_debugger.triage import run_triage


def _run_signal(event: dict[str, Any], signal: signals.ClusterSignal, env: MonitorEnv) -> dict[str, Any]:
    transitions = signals.handle_cluster_event(
        signal,
        triage=lambda req: run_triage(req, clients(req.region)),
        store=FindingStore(clients(env.AWS_REGION), env.FINDINGS_TABLE),
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


def signal_runner(env: MonitorEnv, context: LambdaContext) -> Callable[[signals.ClusterSignal], dict[str, Any]]:
    """Run one signal's triage into the store, once per ``signal.event_id`` (a repeat returns the first
    run's result from the idempotency table)."""
    config = IdempotencyConfig(event_key_jmespath="id", expires_after_seconds=env.IDEMPOTENCY_TTL_S)
    config.register_lambda_context(context)
    run = idempotent_function(
        _run_signal,
        data_keyword_argument="event",
        persistence_store=idempotency_store(env.IDEMPOTENCY_TABLE, env.AWS_REGION),
        config=config,
    )

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


__all__ = ["signal_runner"]
