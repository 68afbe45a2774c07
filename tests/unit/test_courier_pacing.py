"""The courier's pace, on a fake clock: each Slack webhook is a lane every courier shares (about one message
a second, a short burst), a 429's Retry-After holds the lane for everybody, and a message whose slot is
past the invocation waits in the queue exactly that long. Other channels are never paced.

``run`` plays the batch processor the handler uses (``SqsFifoPartialProcessor(skip_group_on_error=True)``):
a record that raises fails, and so do the later records of its group, untried.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pytest

from functions.monitor.logic import outbox
from functions.monitor.logic.outbox import ChannelError, Courier, Lane, LocalLanes, NoLedger, OutboxRecord, Pace, Slot

T0 = 1_800_000_000.0
HOOK = "slack#webhook-0123456789ab"
NEEDED = 8.0  # the stack's Slack timeout (5 s) plus the send margin (3 s)


class Clock:
    def __init__(self) -> None:
        self.t = T0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


@dataclass
class Ports:
    """The courier's ports on a fake clock; ``script[channel]`` answers the next sends (None: delivered)."""

    clock: Clock
    timeout_s: float = 60.0
    script: dict[str, deque[ChannelError | None]] = field(default_factory=dict)
    attempts: list[tuple[float, str, str]] = field(default_factory=list)  # (time, channel, message key)
    backoffs: dict[str, int] = field(default_factory=dict)  # receipt handle -> seconds
    dead: list[str] = field(default_factory=list)
    lane_error: ChannelError | None = None

    def __post_init__(self) -> None:
        self.started = self.clock.t

    def send(self, message: outbox.OutboxMessage) -> None:
        self.attempts.append((self.clock.t, message.channel, message.key))
        answers = self.script.get(message.channel)
        error = answers.popleft() if answers else None
        if error is not None:
            raise error

    def backoff(self, receipt_handle: str, seconds: int) -> None:
        self.backoffs[receipt_handle] = seconds

    def dead_letter(self, body: str, *, group: str, dedup: str, reason: str) -> None:
        self.dead.append(dedup)

    def remaining_s(self) -> float:
        return self.timeout_s - (self.clock.t - self.started)

    def now(self) -> float:
        return self.clock.now()

    def sleep(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    def lane(self, channel: str) -> str | None:
        if self.lane_error is not None:
            raise self.lane_error
        return HOOK if channel == "slack" else None

    def slack_times(self) -> list[float]:
        return [t - T0 for t, channel, _ in self.attempts if channel == "slack"]


class Ledger(NoLedger):
    def __init__(self, done: set[str] | None = None) -> None:
        self.known = set(done or ())

    def done(self, key: str) -> bool:
        return key in self.known

    def mark(self, keys) -> None:
        self.known.update(keys)


class CountingLanes(LocalLanes):
    def __init__(self) -> None:
        super().__init__()
        self.reservations = 0

    def reserve(self, lane: str, pace: Pace, *, now: float, within_s: float) -> Slot:
        self.reservations += 1
        return super().reserve(lane, pace, now=now, within_s=within_s)


def record(channel: str, cluster: str, n: int, *, receives: int = 1) -> OutboxRecord:
    key = f"{cluster}-{n}"
    message = outbox.OutboxMessage(
        id=outbox.message_id(channel, [key]),
        channel=channel,
        group=cluster,
        key=key,
        kind="single",
        records=(key,),
        created_at="2026-12-03T12:00:00+00:00",
        slack={"text": key, "blocks": []} if channel == "slack" else None,
        subject=key if channel == "sns" else None,
        body=key if channel == "sns" else None,
    )
    return OutboxRecord(
        message_id=f"m-{channel}-{key}",
        body=message.to_json(),
        receipt_handle=f"r-{channel}-{key}",
        group=f"{channel}:{cluster}",
        receive_count=receives,
    )


def run(courier: Courier, records: list[OutboxRecord]) -> set[str]:
    """The batch processor: what fails, and the later records of its group with it, untried."""
    failed: set[str] = set()
    stopped: set[str] = set()
    for r in records:
        if r.group in stopped:
            failed.add(r.message_id)
            continue
        try:
            courier.deliver(r)
        except (outbox.NotAttempted, ChannelError):
            failed.add(r.message_id)
            stopped.add(r.group)
    courier.hold_back(records, failed)
    return failed


def courier(ports: Ports, lanes: LocalLanes | None = None, ledger: Ledger | None = None) -> Courier:
    return Courier(ports, ledger or Ledger(), needed_s=NEEDED, lanes=lanes or LocalLanes())


# --------------------------------------------------------------------------- the pace itself


def test_a_quiet_lane_allows_the_burst_then_one_slot_per_interval():
    pace, lane, slots = Pace(interval_s=1.0, burst=3), Lane(), []
    for _ in range(6):
        at, lane = pace.next_slot(lane, T0)
        slots.append(at - T0)
    assert slots == [0, 0, 0, 1, 2, 3]
    # after a quiet spell as long as the burst, the burst is back
    at, _ = pace.next_slot(lane, T0 + 10)
    assert at == T0 + 10 and pace.next_slot(lane, T0 + 3.5)[0] == T0 + 4


def test_a_block_holds_the_lane_and_leaves_no_burst_after_it():
    pace = Pace(interval_s=1.0, burst=3)
    lane = pace.blocked(Lane(), T0 + 7)
    slots = []
    for _ in range(3):
        at, lane = pace.next_slot(lane, T0)
        slots.append(at - T0)
    assert slots == [7, 8, 9]
    # a shorter block said later does not shorten it
    assert pace.blocked(lane, T0 + 3) == lane


# --------------------------------------------------------------------------- one courier


def test_one_courier_sends_the_burst_then_one_message_a_second_without_a_429():
    clock = Clock()
    ports = Ports(clock)
    failed = run(courier(ports), [record("slack", "a", n) for n in range(6)])
    assert failed == set()
    assert ports.slack_times() == [0, 0, 0, 1, 2, 3]
    assert clock.sleeps == [1, 1, 1]


def test_channels_without_a_pace_are_never_paced():
    clock = Clock()
    ports = Ports(clock)
    lanes = CountingLanes()
    run(courier(ports, lanes), [record("sns", "a", n) for n in range(6)])
    assert len(ports.attempts) == 6 and clock.sleeps == [] and lanes.reservations == 0


# --------------------------------------------------------------------------- couriers sharing the lane


def test_two_couriers_on_one_webhook_keep_one_pace_between_them():
    clock = Clock()
    shared = LocalLanes()  # what the idempotency table is to concurrent couriers
    first, second = Ports(clock), Ports(clock)
    run(courier(first, shared), [record("slack", "a", n) for n in range(3)])
    run(courier(second, shared), [record("slack", "b", n) for n in range(3)])
    # the first took the burst; the second waited for the slots after it
    assert first.slack_times() == [0, 0, 0] and second.slack_times() == [1, 2, 3]


def test_a_slot_past_the_invocation_leaves_the_message_in_the_queue_exactly_that_long():
    clock = Clock()
    shared = LocalLanes()
    shared.lanes[HOOK] = Lane(due=T0 + 32)  # other couriers hold the next 30 slots
    ports = Ports(clock, timeout_s=20)  # 12 s to spare beyond what a send needs
    lanes = CountingLanes()
    lanes.lanes = shared.lanes
    batch = [
        record("slack", "a", 1),
        record("slack", "a", 2),
        record("slack", "b", 1),
        record("sns", "a", 1),
    ]
    failed = run(courier(ports, lanes), batch)
    # the slot is 30 s away: the message, its group and the other cluster's Slack message wait 30 s,
    # not the exponential 60; the email went at once
    assert failed == {r.message_id for r in batch[:3]}
    assert ports.backoffs == {r.receipt_handle: 30 for r in batch[:3]}
    assert [c for _, c, _ in ports.attempts] == ["sns"]
    # the lane was asked once: the later Slack message knew the answer
    assert lanes.reservations == 1 and lanes.lanes[HOOK] == Lane(due=T0 + 32)


def test_a_slow_lane_that_eats_the_margin_leaves_the_message_for_later():
    clock = Clock()

    class SlowLanes(LocalLanes):
        def reserve(self, lane, pace, *, now, within_s):
            slot = super().reserve(lane, pace, now=now, within_s=within_s)
            clock.t += 5  # a round trip to the table that took its time
            return slot

    ports = Ports(clock, timeout_s=NEEDED + 3)
    failed = run(courier(ports, SlowLanes()), [record("slack", "a", 1)])
    assert failed and ports.attempts == []


# --------------------------------------------------------------------------- Retry-After


def test_a_429_holds_every_courier_until_its_retry_after_and_only_slack():
    clock = Clock()
    shared = LocalLanes()
    ports = Ports(clock, script={"slack": deque([ChannelError("slack: 429", retry_after=7.0)])})
    batch = [record("slack", "a", 1), record("slack", "a", 2), record("slack", "b", 1)]
    failed = run(courier(ports, shared), batch)
    # the rate-limited message and its group wait the 7 s Slack asked for, not the exponential 60 ...
    assert ports.backoffs == {batch[0].receipt_handle: 7, batch[1].receipt_handle: 7}
    # ... and the other cluster's message, in the same invocation, waited out the block and went, once
    assert failed == {batch[0].message_id, batch[1].message_id}
    assert ports.slack_times() == [0, 7] and clock.sleeps == [7]
    # a courier of a third cluster, two seconds after the 429, with no time to wait: it leaves its Slack
    # message in the queue until its slot, 6 s away (the block's end at 7 went to cluster b; then 8)
    clock.t = T0 + 2
    other = Ports(clock, timeout_s=NEEDED + 1)
    late = [record("slack", "c", 1), record("sns", "c", 1)]
    failed = run(courier(other, shared), late)
    assert other.backoffs == {late[0].receipt_handle: 6}
    assert failed == {late[0].message_id}
    # email is not held back by Slack's 429
    assert [(t - T0, c) for t, c, _ in other.attempts] == [(2, "sns")]


def test_a_429_without_retry_after_keeps_the_exponential_schedule():
    clock = Clock()
    ports = Ports(clock, script={"slack": deque([ChannelError("slack: 429")])})
    batch = [record("slack", "a", 1), record("slack", "b", 1, receives=2)]
    failed = run(courier(ports), batch)
    assert failed == {r.message_id for r in batch}
    assert ports.backoffs == {batch[0].receipt_handle: 60, batch[1].receipt_handle: 120}
    assert ports.slack_times() == [0]


# --------------------------------------------------------------------------- the guarantees that stay


def test_a_refused_payload_goes_to_the_dead_letter_queue_and_the_group_goes_on():
    clock = Clock()
    ports = Ports(clock, script={"slack": deque([ChannelError("slack: 400 invalid_blocks", permanent=True)])})
    batch = [record("slack", "a", 1), record("slack", "a", 2)]
    assert run(courier(ports), batch) == set()
    assert len(ports.dead) == 1 and ports.slack_times() == [0, 0]


def test_a_message_sent_before_takes_no_slot():
    clock = Clock()
    lanes = CountingLanes()
    sent = record("slack", "a", 1)
    done = {f"sent#{outbox.OutboxMessage.from_json(sent.body).id}"}
    run(courier(Ports(clock), lanes, Ledger(done)), [sent])
    assert lanes.reservations == 0


def test_without_the_time_a_send_needs_no_slot_is_taken_and_nothing_is_tried():
    clock = Clock()
    lanes = CountingLanes()
    ports = Ports(clock, timeout_s=NEEDED - 1)
    failed = run(courier(ports, lanes), [record("slack", "a", 1), record("sns", "b", 1)])
    assert len(failed) == 2 and ports.attempts == [] and lanes.reservations == 0


def test_an_unreadable_webhook_secret_is_a_failure_with_the_exponential_schedule():
    clock = Clock()
    ports = Ports(clock, lane_error=ChannelError("the Slack webhook secret could not be read (ClientError)"))
    batch = [record("slack", "a", 1), record("slack", "b", 1), record("sns", "a", 1)]
    failed = run(courier(ports), batch)
    assert failed == {batch[0].message_id, batch[1].message_id}
    assert ports.backoffs == {batch[0].receipt_handle: 60, batch[1].receipt_handle: 60}
    assert [c for _, c, _ in ports.attempts] == ["sns"]


@pytest.mark.parametrize(("delay", "seconds"), [(0.0, 1), (0.2, 1), (1.0, 1), (1.001, 2), (29.5, 30)])
def test_a_wait_in_the_queue_is_never_shorter_than_the_slot(delay, seconds):
    clock = Clock()
    shared = LocalLanes()
    shared.lanes[HOOK] = Lane(due=T0 + 2 + delay)
    ports = Ports(clock, timeout_s=NEEDED)
    run(courier(ports, shared), [r := record("slack", "a", 1)])
    assert ports.backoffs == ({r.receipt_handle: seconds} if delay > 0 else {})
