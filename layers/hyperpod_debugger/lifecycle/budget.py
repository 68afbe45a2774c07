"""How the monitor shares the account's StartSession rate (pure: the stack, the sweep's cluster step and the
sweep benchmark all use it).

The account's rate (context ``startSessionRate``, about 3 calls a second) is split three ways: a reserve left
to people's own Session Manager sessions (``startSessionReservePercent``, 34 % by default: one call a second of
3), the event windows' probes (``EVENT_WINDOW_PROBE_RATE``, 0.5 a second) and the sweep, which gets the rest
(1.48 a second by default). The stack fixes the sweep's part and how many clusters run at once; each cluster
step takes its share when its checks end (:func:`share`). The probe runner also slows down on its own while
Session Manager throttles (``hyperpod_debugger.probe.pace.SessionPace``), so people's sessions get through.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: StartSession calls a second one probe Lambda aims at (its slots follow from it).
WORKER_RATE = 1.0
PROBE_TIMEOUT_S = 120

#: The account's StartSession calls a second when ``startSessionRate`` is not set (infra/constants.py).
ACCOUNT_RATE = 3.0
#: The share of the account's rate the monitor leaves to people (``startSessionReservePercent``): an on-call
#: engineer opening sessions during an incident must not compete with the sweep. 34 % of 3 is 1.02 a second,
#: at least one session a second for people at the default rate.
RESERVE_PERCENT = 34.0
#: StartSession calls a second an event window's probes use: the stack gives it to the window function as
#: ``EVENT_WINDOW_PROBE_RATE`` (``functions.shared.env.MonitorEnv``'s default and
#: ``functions.monitor.logic.windows.WINDOW_PROBE_RATE`` are the same; a test keeps them equal). It comes out
#: of the same unreserved part as the sweep's.
EVENT_WINDOW_RATE = 0.5


@dataclass(frozen=True)
class SweepSettings:
    """What the stack fixes at deploy time: the account's rate, the share reserved for people, the event
    windows' part and how many clusters run at once. Rates, workers, batch sizes and rounds are decided at run
    time (:func:`share`). Raises ``ValueError`` naming the setting when they leave the sweep nothing."""

    start_session_rate: float
    cluster_concurrency: int
    reserve_percent: float = RESERVE_PERCENT
    window_rate: float = EVENT_WINDOW_RATE

    def __post_init__(self) -> None:
        if self.start_session_rate <= 0 or self.cluster_concurrency < 1:
            raise ValueError("startSessionRate must be > 0 and sweepClusterConcurrency >= 1")
        if not 0 <= self.reserve_percent < 100:
            raise ValueError(
                "startSessionReservePercent (the share of startSessionRate left to people's own Session Manager "
                f"sessions) must be at least 0 and below 100, got {self.reserve_percent:g}"
            )
        if self.window_rate < 0:
            raise ValueError(f"the event windows' probe rate must not be negative, got {self.window_rate:g}")
        if self.usable_rate <= 0:
            raise ValueError(
                f"startSessionReservePercent {self.reserve_percent:g} leaves {self.unreserved_rate:.2f} of the "
                f"{self.start_session_rate:g} StartSession calls a second of startSessionRate, no more than the "
                f"event windows' {self.window_rate:g}/s: nothing is left for the sweep. Lower "
                "startSessionReservePercent or raise startSessionRate (to the account's real rate)"
            )

    @property
    def reserved_rate(self) -> float:
        """StartSession calls a second the monitor never uses: people's."""
        return self.start_session_rate * self.reserve_percent / 100

    @property
    def unreserved_rate(self) -> float:
        """What the sweep and the event windows use together, at most."""
        return self.start_session_rate - self.reserved_rate

    @property
    def usable_rate(self) -> float:
        """The sweep's part, shared at run time among the clusters it runs at once."""
        return usable_rate(self.start_session_rate, self.reserve_percent, self.window_rate)


# --------------------------------------------------------------------------- the share at run time


def usable_rate(
    start_session_rate: float, reserve_percent: float = RESERVE_PERCENT, window_rate: float = EVENT_WINDOW_RATE
) -> float:
    """What the sweep may use of ``start_session_rate`` (the account's rate, ``startSessionRate``): what the
    reserve for people leaves, less the event windows' part. May be zero or less (``SweepSettings`` refuses)."""
    return start_session_rate * (1 - reserve_percent / 100) - window_rate


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

    ``usable_rate``: the sweep's part of the account's rate (:func:`usable_rate`); ``clusters``: how many
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
