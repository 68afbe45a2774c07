"""How the sweep shares the account's StartSession budget (pure: the stack and the sweep benchmark both use it).

The budget (context ``startSessionRate``, about 3 calls a second per account) is split into workers of about
one call a second: ``clusters × batches`` probe Lambdas run at once and each gets
``rate / (clusters × batches)``. Batch size and the per-sweep cap follow from that rate so every Lambda ends
well inside its timeout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: StartSession calls a second one probe Lambda aims at: 16 sessions in flight, each ~15-60 s.
WORKER_RATE = 1.0
#: Seconds of one sweep spent starting probe sessions (the state machine stops at 14 minutes).
PROBE_WINDOW_S = 480
#: A batch starts its sessions in about this many seconds; with the probe's own timeout it ends in
#: a few minutes, far from the function's 10-minute limit.
BATCH_START_S = 120
PROBE_TIMEOUT_S = 120


@dataclass(frozen=True)
class SweepBudget:
    """How the StartSession budget is shared (all derived; see the module docstring)."""

    clusters: int  # outer Map MaxConcurrency
    batches: int  # inner Map MaxConcurrency (per cluster)
    rate: float  # StartSession calls a second per probe Lambda
    batch_size: int  # nodes per probe Lambda
    cap: int  # most nodes one sweep probes in one cluster

    @classmethod
    def derive(cls, start_session_rate: float, cluster_concurrency: int) -> SweepBudget:
        if start_session_rate <= 0 or cluster_concurrency < 1:
            raise ValueError("startSessionRate must be > 0 and sweepClusterConcurrency >= 1")
        workers = max(1, math.floor(start_session_rate / WORKER_RATE))
        clusters = min(cluster_concurrency, workers)
        batches = max(1, workers // clusters)
        rate = start_session_rate / (clusters * batches)
        batch_size = max(10, min(100, math.floor(rate * BATCH_START_S)))
        cap = max(batch_size, math.floor(batches * rate * PROBE_WINDOW_S))
        return cls(clusters=clusters, batches=batches, rate=rate, batch_size=batch_size, cap=cap)
