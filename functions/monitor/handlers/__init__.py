"""The monitor's Lambda entry points, one module each; the stack names them ``<module>.handler``.

| module | trigger | calls |
|---|---|---|
| :mod:`.events` | EventBridge: HyperPod's detail-types | ``logic.windows.enqueue`` (or ``handle_cluster_event``) |
| :mod:`.hma` | CloudWatch Logs subscription on a cluster log group | ``logic.windows.enqueue`` (or ``triage_nodes``) |
| :mod:`.windows` | the window queue (SQS, delayed until a window is due) | ``logic.windows.run_window`` |
| :mod:`.sweep` | the sweep state machine, one cluster per call | ``logic.sweep.sweep_cluster`` |
| :mod:`.probes` | the sweep's inner Map, one batch of nodes per call | ``logic.batch.probe_batch`` |
| :mod:`.stream` | the findings table's DynamoDB stream | ``logic.stream.Notifier`` (per record) |
| :mod:`.alerts` | the alert-group queue (SQS, delayed); daily | ``logic.alert_groups.flush`` (or ``daily_summary``) |
| :mod:`.outbox` | the outbox (SQS FIFO) | ``logic.outbox.Courier`` (per record) |

The batch functions (windows, stream, alerts, outbox) hand each record to Powertools' batch processor: a record
handler that raises fails its record, and the steps across records hook the processor (``handlers.stream``,
``handlers.outbox``).

Importing this package imports none of them (each function loads only its own). For the demo and the tests, the
entry points are also reachable by their old names (``handlers.event_handler``, ...), loaded on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: name → (module, attribute): the entry points by the names the demo and the tests use
ENTRY_POINTS = {
    "event_handler": "events",
    "log_subscription": "hma",
    "event_window": "windows",
    "sweep_cluster": "sweep",
    "probe_batch": "probes",
    "stream_notifier": "stream",
    "alert_groups": "alerts",
    "courier": "outbox",
}


def __getattr__(name: str) -> Any:
    if name in ENTRY_POINTS:
        return import_module(f"{__name__}.{ENTRY_POINTS[name]}").handler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
