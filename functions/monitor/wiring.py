"""What several entry points build the same way: the delivery ledger and keeping what cannot be processed aside
(the triage's ports: :mod:`.signal_run`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from functions.monitor.adapters import DeliveryLedger
from functions.monitor.logic import outbox
from functions.monitor.runtime import deadline, keep_unprocessed
from functions.shared.clients import bookkeeping_clients
from functions.shared.observability import logger

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from functions.shared.env import AlertsEnv, CourierEnv, MonitorEnv, NotifierEnv

#: Keeps an input aside with why (True: kept; False: nowhere to keep it; raises ``RuntimeError`` when refused).
SetAside = Callable[[Any, str], bool]


def delivery_ledger(env: NotifierEnv | AlertsEnv | CourierEnv, context: LambdaContext) -> outbox.Ledger:
    """What was already queued and sent, in the idempotency table (none configured: nothing is remembered)."""
    if not env.IDEMPOTENCY_TABLE:
        return outbox.NoLedger()
    return DeliveryLedger(bookkeeping_clients(env.AWS_REGION), env.IDEMPOTENCY_TABLE, deadline=deadline(context))


def report_ledger(ledger: outbox.Ledger) -> None:
    if isinstance(ledger, DeliveryLedger) and ledger.errors:
        # Not fatal: at worst a retried record is queued or sent again (the outbox's deduplication still holds).
        logger.warning("delivery ledger unavailable", errors=ledger.errors[:5])


def set_aside(env: MonitorEnv | NotifierEnv | AlertsEnv, *, kind: str, at: str) -> SetAside:
    """Keep an input of this kind in the unprocessed-events queue, the reason given ``at`` its place."""

    def keep(content: Any, reason: str) -> bool:
        errors = [{"at": at, "error": reason}]
        return keep_unprocessed(env.UNPROCESSED_QUEUE_URL, env.AWS_REGION, content, kind=kind, errors=errors)

    return keep
