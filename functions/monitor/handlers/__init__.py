"""The monitor's Lambda entry points, one module each; the stack names them ``<module>.handler``.

| module | trigger | calls |
|---|---|---|
| :mod:`.events` | EventBridge: HyperPod's detail-types | ``logic.windows.enqueue`` (or ``handle_cluster_event``) |
| :mod:`.hma` | CloudWatch Logs subscription on a cluster log group | ``logic.windows.enqueue`` (or ``triage_nodes``) |
| :mod:`.windows` | the window queue (SQS, delayed until a window is due) | ``logic.windows.run_window`` |
| :mod:`.sweep` | the sweep state machine, one cluster per call | ``logic.sweep.sweep_cluster`` |
| :mod:`.probes` | the sweep's inner Map, one batch of nodes per call | ``logic.sweep.probe_batch`` |
| :mod:`.stream` | the findings table's DynamoDB stream | ``logic.stream.notify`` |
| :mod:`.alerts` | the alert-group queue (SQS, delayed), and the daily schedule | ``logic.alert_groups.flush`` |
| :mod:`.outbox` | the outbox (SQS FIFO) | ``logic.outbox.Courier`` |

Importing this package imports none of them (each function loads only its own). For the demo and the
tests, the entry points are also reachable by their old names (``handlers.event_handler``, ...),
loaded on first use.
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
