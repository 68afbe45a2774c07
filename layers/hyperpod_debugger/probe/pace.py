"""The pace of one probe run's StartSession calls: at most its rate, slower while Session Manager throttles the
account (so people's sessions get through), and none after the round closes."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients

#: The IAM action whose throttled answers the pace watches (``AwsClients.throttles`` counts them).
START_SESSION = "ssm:StartSession"

#: A throttled StartSession halves the pace (multiplicative decrease): the account is at its rate, most likely
#: because people are opening sessions, and the monitor is the one that can wait.
YIELD_FACTOR = 0.5
#: The pace never drops below this share of its ceiling: the batch keeps probing (its suspects first), slowly.
YIELD_FLOOR = 1 / 8
#: Throttled answers within this long of a halving are the same congestion (botocore retries one call a few
#: times within seconds, and each attempt is counted): they halve the pace once.
YIELD_HOLD_S = 5.0
#: After this long without a throttled answer the pace climbs back by RECOVER_STEP of its ceiling, and again
#: after each such quiet stretch (additive increase: from half the ceiling back to it in a minute).
RECOVER_AFTER_S = 15.0
RECOVER_STEP = 1 / 8


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class PaceClock:
    """The time the pace runs on: monotonic seconds, a way to wait, and the wall clock (to place a round's
    close, a datetime, on the monotonic one). Tests inject a simulated one."""

    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep
    wall: Callable[[], datetime] = _utc_now


#: The clock a probe run uses when its options name none (read at each run, so a test can replace it).
SYSTEM_CLOCK = PaceClock()


@dataclass(frozen=True, slots=True)
class PaceReport:
    """How one probe run paced its StartSession calls (what the probe batch logs and counts)."""

    #: the run's rate (the batch's share of the sweep's part of the account's rate)
    ceiling: float
    #: the slowest pace the run fell to, and where it ended
    lowest: float
    final: float
    #: throttled StartSession answers seen during the run (botocore's own retries included)
    throttles: int
    started: int
    #: nodes whose session was not started: the round closed first (they stay due, the next sweep leads with
    #: them); never a verdict on the node
    not_started: tuple[str, ...] = ()

    @property
    def yielded(self) -> bool:
        return self.lowest < self.ceiling


class SessionPace:
    """When each StartSession call of one probe run may go: at most ``ceiling`` a second, slower while Session
    Manager throttles the account (:data:`YIELD_FACTOR` per congestion, down to :data:`YIELD_FLOOR` of the
    ceiling, back up by :data:`RECOVER_STEP` per quiet :data:`RECOVER_AFTER_S`), and none at or after
    ``deadline`` (the round's close, on ``clock.monotonic``).

    ``throttled`` returns how many throttled StartSession answers there have been so far (a running count:
    ``AwsClients.throttles``); the pace looks at it each time a call asks to start, so throttles seen while
    waiting slow the next call down too.
    """

    def __init__(
        self,
        ceiling: float,
        *,
        throttled: Callable[[], int],
        clock: PaceClock | None = None,
        deadline: float | None = None,
    ) -> None:
        if ceiling <= 0:
            raise ValueError("the pace's ceiling must be positive")
        self.ceiling = ceiling
        self.rate = ceiling
        self.lowest = ceiling
        self.deadline = deadline
        self.throttles = 0
        self.started = 0
        #: (when, rate) each time the pace changed, on the pace's clock
        self.changes: list[tuple[float, float]] = []
        self._clock = clock or SYSTEM_CLOCK
        self._throttled = throttled
        self._seen = throttled()
        self._last_start: float | None = None
        self._held_until = -math.inf
        self._quiet_since = self._clock.monotonic()
        self._lock = asyncio.Lock()

    def _set(self, rate: float, now: float) -> None:
        if rate != self.rate:
            self.rate = rate
            self.lowest = min(self.lowest, rate)
            self.changes.append((now, rate))

    def _observe(self, now: float) -> None:
        count = self._throttled()
        new, self._seen = count - self._seen, count
        if new > 0:
            self.throttles += new
            self._quiet_since = now
            if now >= self._held_until:
                self._set(max(self.ceiling * YIELD_FLOOR, self.rate * YIELD_FACTOR), now)
                self._held_until = now + YIELD_HOLD_S
            return
        if self.rate < self.ceiling:
            steps = int((now - self._quiet_since) // RECOVER_AFTER_S)
            if steps > 0:
                self._quiet_since += steps * RECOVER_AFTER_S
                self._set(min(self.ceiling, self.rate + steps * RECOVER_STEP * self.ceiling), now)

    async def start(self) -> bool:
        """Wait for this call's turn; False (at once) when its turn would come at or after the deadline."""
        async with self._lock:  # one call decides at a time, in the order they asked
            while True:
                now = self._clock.monotonic()
                self._observe(now)
                due = now if self._last_start is None else max(now, self._last_start + 1 / self.rate)
                if self.deadline is not None and due >= self.deadline:
                    return False
                if due <= now:
                    self._last_start = now
                    self.started += 1
                    return True
                await self._clock.sleep(due - now)  # then look again: throttles may have come meanwhile

    def report(self, not_started: Sequence[str] = ()) -> PaceReport:
        return PaceReport(
            ceiling=self.ceiling,
            lowest=self.lowest,
            final=self.rate,
            throttles=self.throttles,
            started=self.started,
            not_started=tuple(not_started),
        )


def throttle_count(clients: AwsClients) -> Callable[[], int]:
    """The clients' running count of throttled StartSession answers (0 for clients that keep none)."""
    counter = getattr(clients, "throttles", None)
    return (lambda: int(counter[START_SESSION])) if counter is not None else (lambda: 0)
