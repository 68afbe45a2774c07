"""How the sweep shares the account's StartSession budget (pure: the stack, the sweep's cluster step and the
sweep benchmark all use it).

The stack fixes the budget (context ``startSessionRate``, about 3 calls a second per account, less a headroom)
and how many clusters run at once; each cluster step takes its share when its checks end (:func:`share`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: StartSession calls a second one probe Lambda aims at (its slots follow from it).
WORKER_RATE = 1.0
PROBE_TIMEOUT_S = 120


@dataclass(frozen=True)
class SweepSettings:
    """What the stack fixes at deploy time: the account's budget and how many clusters run at once. Rates,
    workers, batch sizes and rounds are decided at run time (:func:`share`)."""

    start_session_rate: float
    cluster_concurrency: int

    def __post_init__(self) -> None:
        if self.start_session_rate <= 0 or self.cluster_concurrency < 1:
            raise ValueError("startSessionRate must be > 0 and sweepClusterConcurrency >= 1")

    @property
    def usable_rate(self) -> float:
        return usable_rate(self.start_session_rate)


# --------------------------------------------------------------------------- the share at run time

#: The share of the account's StartSession budget the sweep leaves for people's own sessions.
SESSION_HEADROOM = 0.1


def usable_rate(start_session_rate: float) -> float:
    """What the sweep may use of ``start_session_rate`` (the account's budget, ``startSessionRate``)."""
    return start_session_rate * (1 - SESSION_HEADROOM)


#: The longest a probe Lambda may live (Lambda stops it at 15 minutes), less a margin.
LAMBDA_LIFE_S = 870.0
#: Sessions stop starting this long before the next sweep begins (its cluster step reads the cluster then).
STOP_MARGIN_S = 30.0
#: A probe session's 95th-percentile time, start to document: each Lambda keeps ``rate × this`` slots.
P95_SESSION_S = 60.0
#: Sessions one probe Lambda keeps open at most, whatever its rate.
MAX_SLOTS = 64


@dataclass(frozen=True)
class ClusterShare:
    """One cluster's part of one sweep, decided when its cluster step ends.

    ``workers`` probe Lambdas run side by side, each starting sessions at ``worker_rate``; every worker runs
    one batch per round, and the rounds cover the time from the end of the cluster step to shortly before the
    next sweep, each short enough that its Lambda can drain its last sessions inside Lambda's limit. A
    worker's batches of different rounds never start sessions at the same time, so the cluster never starts
    more than ``rate`` sessions a second.
    """

    rate: float
    workers: int
    worker_rate: float
    slots: int
    #: (start, stop) of each round, seconds after the sweep began: sessions start only inside it
    rounds: tuple[tuple[float, float], ...]

    def batch_size(self, round_index: int) -> int:
        start, stop = self.rounds[round_index]
        return max(0, math.floor(self.worker_rate * (stop - start)))

    @property
    def cap(self) -> int:
        """The most nodes this sweep can probe in the cluster."""
        return self.workers * sum(self.batch_size(i) for i in range(len(self.rounds)))

    @property
    def concurrency(self) -> int:
        """Batches in flight at once (the inner Map's MaxConcurrency): every batch, each waiting for its round."""
        return max(1, self.workers * len(self.rounds))


def share(
    usable_rate: float,
    *,
    clusters: int,
    cluster_concurrency: int,
    interval_s: float,
    elapsed_s: float,
    probe_timeout_s: float,
) -> ClusterShare:
    """This cluster's share of the account's StartSession budget for the sweep under way.

    ``usable_rate``: the budget less the headroom left for people's own sessions; ``clusters``: how many
    clusters this sweep covers; ``cluster_concurrency``: how many run at once (so one cluster alone gets the
    whole budget); ``elapsed_s``: the sweep's age when the cluster step ended.
    """
    if usable_rate <= 0 or interval_s <= 0 or probe_timeout_s <= 0:
        raise ValueError("the rate, the interval and the probe timeout must be positive")
    running = max(1, min(clusters, cluster_concurrency))
    rate = usable_rate / running
    workers = max(1, math.ceil(rate / WORKER_RATE - 1e-9))
    worker_rate = rate / workers
    slots = min(MAX_SLOTS, max(2, math.ceil(worker_rate * P95_SESSION_S) + 2))
    start, stop = max(0.0, elapsed_s), interval_s - STOP_MARGIN_S
    longest = max(1.0, LAMBDA_LIFE_S - probe_timeout_s)
    rounds: tuple[tuple[float, float], ...] = ()
    if stop > start:
        count = math.ceil((stop - start) / longest)
        length = (stop - start) / count
        rounds = tuple((start + i * length, start + (i + 1) * length) for i in range(count))
    return ClusterShare(rate=rate, workers=workers, worker_rate=worker_rate, slots=slots, rounds=rounds)
