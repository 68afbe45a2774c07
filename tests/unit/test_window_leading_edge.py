"""The leading edge of the event windows (``functions.monitor.logic.windows``): an urgent event on a quiet cluster
is triaged in seconds, a storm is still read once per window, and the leading read is paid back once.

The storms here run on a simulated clock over an in-memory table that keeps the adapter's conditional rules
(a write holds only while the record is as it was seen); ``tests/integration/test_window_leading_edge.py``
runs the same through the DynamoDB adapter and the real handlers."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest

from functions.monitor.logic import signals, windows
from functions.shared.events import parse_hyperpod_event
from hyperpod_debugger.lifecycle.findings import parse_iso
from tests.unit.test_eventbridge import CAPACITY, HEALTH_DOCS, STATE_CAPTURE, STATE_DOCS, published

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh"
W = windows.WINDOW_S
LEAD = windows.LEAD_S


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def signal(n: int = 0, *, source: str = "Node Health Event", status: str | None = "Unhealthy") -> signals.ClusterSignal:
    node = f"i-{n:017x}"
    health = None
    if source == "Node Health Event":
        health = signals.NodeHealthReport(instance_id=node, status=status, reason=None, repair_action=None)
    return signals.ClusterSignal(
        event_id=f"e-{n:05d}", cluster_arn=ARN, region="us-west-2", node=node, health=health, source=source
    )


# --- which events lead ----------------------------------------------------------------------------------


def parsed(event: dict) -> signals.ClusterSignal:
    out = signals.signal_of(parse_hyperpod_event(event))
    assert out is not None
    return out


def test_a_fault_hyperpod_reports_and_an_error_event_are_urgent_routine_events_are_not():
    health = copy.deepcopy(published(HEALTH_DOCS))
    health["detail"]["InstanceId"] = "i-0123456789abcdef0"  # the documented example's id is not an instance id
    healthy = copy.deepcopy(health)
    healthy["detail"]["HealthSummary"]["HealthStatus"] = "Healthy"
    warn = copy.deepcopy(published(CAPACITY))
    warn["detail"]["EventDetails"]["EventLevel"] = "Warn"
    failed = copy.deepcopy(published(STATE_DOCS))
    failed["detail"]["ClusterStatus"] = "Failed"
    assert windows.urgent(parsed(health))  # HMA: NvidiaErrorTerminate, Unhealthy
    assert windows.urgent(parsed(published(CAPACITY)))  # Error: instance creation failed
    assert windows.urgent(parsed(failed))
    assert not windows.urgent(parsed(healthy))  # the node is back
    assert not windows.urgent(parsed(warn))
    assert not windows.urgent(parsed(published(STATE_DOCS)))  # InService
    assert not windows.urgent(parsed(published(STATE_CAPTURE)))  # Updating (a scale-up)
    assert windows.urgent(signal(source="health-agent log record", status=None))
    # a Node Health Event whose node cannot be read triages the whole cluster: urgent, whatever it says
    assert windows.urgent(parsed(published(HEALTH_DOCS)))


# --- when a window is due -------------------------------------------------------------------------------


def claimed(window: windows.Window, seconds: float) -> windows.LastWindow:
    return windows.LastWindow(window, at(seconds))


def test_an_urgent_event_on_a_cluster_with_no_window_leads():
    window = windows.plan_window(signal(), None, at(0))
    assert window is not None and window.leading
    assert window.due_at == at(LEAD) and window.opened_at == at(0)
    assert (window.seq, window.cooldown_s) == (0, W)


def test_a_routine_event_on_a_quiet_cluster_waits_a_whole_window_as_before():
    window = windows.plan_window(signal(status="Healthy"), None, at(0))
    assert window is not None and not window.leading and window.due_at == at(W)


def test_an_event_joins_the_open_window_urgent_or_not():
    routine = windows.plan_window(signal(1, status="Healthy"), None, at(0))
    assert routine is not None
    assert windows.plan_window(signal(2), windows.LastWindow(routine), at(10)) is None
    # even past due (its message is on its way) until it is stale
    assert windows.plan_window(signal(3), windows.LastWindow(routine), at(W + 60)) is None


def test_within_the_cooldown_the_window_is_due_when_it_ends_and_does_not_lead():
    lead = windows.plan_window(signal(1), None, at(0))
    assert lead is not None
    follow = windows.plan_window(signal(2), claimed(lead, LEAD), at(30))
    assert follow is not None and not follow.leading
    assert follow.due_at == at(LEAD + W) and follow.opened_at == at(30)
    assert (follow.seq, follow.led) == (1, True)


def test_a_cluster_is_quiet_again_once_the_cooldown_has_passed():
    lead = windows.plan_window(signal(1), None, at(0))
    assert lead is not None
    again = windows.plan_window(signal(2), claimed(lead, LEAD), at(LEAD + W))
    assert again is not None and again.leading and again.due_at == at(LEAD + W + LEAD)


def test_the_leading_read_is_paid_back_once_after_the_first_follow_up():
    lead = windows.plan_window(signal(1), None, at(0))
    assert lead is not None
    first = windows.plan_window(signal(2), claimed(lead, 2), at(3))
    assert first is not None and first.cooldown_s == 2 * W
    second = windows.plan_window(signal(3), claimed(first, 102), at(103))
    assert second is not None and second.due_at == at(102 + 2 * W) and second.cooldown_s == W
    third = windows.plan_window(signal(4), claimed(second, 302), at(303))
    assert third is not None and third.due_at == at(302 + W) and third.seq == 3
    # quiet means past the cooldown the record asks for: 150 s after the first follow-up is not quiet yet
    waiting = windows.plan_window(signal(5), claimed(first, 102), at(252))
    assert waiting is not None and not waiting.leading and waiting.due_at == at(302)


def test_a_run_that_did_not_lead_has_nothing_to_pay_back():
    routine = windows.plan_window(signal(1, status="Healthy"), None, at(0))
    assert routine is not None
    first = windows.plan_window(signal(2), claimed(routine, W), at(W + 1))
    assert first is not None and first.cooldown_s == W and not first.led


def test_a_lost_window_is_taken_over_from_where_it_started_and_an_urgent_event_leads_the_takeover():
    lost = windows.plan_window(signal(1, status="Healthy"), None, at(0))
    assert lost is not None
    stale = at(W) + windows.STALE_AFTER + timedelta(seconds=1)
    taken = windows.plan_window(signal(2), windows.LastWindow(lost), stale)
    assert taken is not None and taken.window_id != lost.window_id
    assert taken.opened_at == lost.opened_at and taken.leading and taken.due_at == stale + timedelta(seconds=LEAD)


def test_a_window_message_without_the_run_reads_as_a_window_of_its_own():
    window = windows.Window.from_message(
        {"cluster_arn": ARN, "region": "us-west-2", "window_id": "w-1", "due_at": "2026-12-03T12:00:00Z"}
    )
    assert (window.seq, window.led, window.cooldown_s, window.leading) == (0, False, W, False)


# --- an in-memory table with the adapter's conditional rules ----------------------------------------------


@dataclass
class MemoryWindows:
    """``WindowsPort`` in memory: every write holds only while the record is as the writer saw it."""

    record: windows.LastWindow | None = None
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    writes: int = 0

    def keep(self, cluster_arn: str, record: dict[str, Any], now: datetime) -> None:
        self.events[record["event_id"]] = record

    def _is(self, seen: windows.LastWindow | None) -> bool:
        now = self.record
        if now is None or seen is None:
            return now is None and seen is None
        return now.window.window_id == seen.window.window_id and now.open == seen.open

    def open(self, window: windows.Window, *, replacing: windows.LastWindow | None) -> windows.Opened:
        if not self._is(replacing):
            return windows.Opened(False, self.record)
        self.writes += 1
        self.record = windows.LastWindow(window)
        return windows.Opened(True)

    def cancel(self, window: windows.Window, *, restore: windows.LastWindow | None) -> None:
        if self.record is not None and self.record.open and self.record.window.window_id == window.window_id:
            self.record = restore

    def claim(self, window: windows.Window, now: datetime) -> Literal["claimed", "gone", "superseded"]:
        current = self.record
        if current is not None and current.open and current.window.window_id == window.window_id:
            self.record = windows.LastWindow(current.window, now)
            return "claimed"
        if current is None or current.window.window_id == window.window_id:
            return "gone"
        return "superseded" if current.window.opened_at <= window.opened_at else "gone"

    def kept(self, cluster_arn: str) -> list[dict[str, Any]]:
        return sorted(self.events.values(), key=lambda r: (r["received_at"], r["event_id"]))

    def discard(self, cluster_arn: str, event_ids: Sequence[str]) -> int:
        return sum(1 for e in event_ids if self.events.pop(e, None) is not None)


@dataclass
class SimQueue:
    """The window queue on the simulated clock: a message arrives ``delay_s`` after it was sent."""

    clock: float = 0.0
    pending: list[tuple[float, windows.Window]] = field(default_factory=list)
    fail: bool = False

    def schedule(self, window: windows.Window, delay_s: int) -> None:
        if self.fail:
            raise RuntimeError("SQS refused the message")
        self.pending.append((self.clock + delay_s, window))


@dataclass
class Storm:
    #: (seconds the claim happened, event ids the window's triage handled)
    triages: list[tuple[float, list[str]]]
    arrived: dict[str, float]

    @property
    def reads(self) -> int:
        return len(self.triages)

    def latency(self, event_id: str) -> float:
        return next(t for t, ids in self.triages if event_id in ids) - self.arrived[event_id]


def storm(events: list[tuple[float, signals.ClusterSignal]], table: MemoryWindows | None = None) -> Storm:
    """Every event enqueued at its time; every window message delivered when due, its window run then."""
    table = table or MemoryWindows()
    queue = SimQueue()
    triages: list[tuple[float, list[str]]] = []

    def deliver(until: float) -> None:
        while due := sorted((p for p in queue.pending if p[0] <= until), key=lambda p: p[0]):
            when, window = due[0]
            queue.pending.remove(due[0])
            queue.clock = when

            def run(handled: windows.WindowEvents, when: float = when) -> dict[str, Any]:
                triages.append((when, handled.event_ids))
                return {}

            windows.run_window(window, windows=table, run=run, keep_unreadable=lambda _: None, now=at(when))

    arrived = {}
    for t, s in events:
        deliver(t)
        queue.clock = t
        arrived[s.event_id] = t
        windows.enqueue(s, windows=table, queue=queue, now=at(t))
    deliver(math.inf)
    return Storm(triages, arrived)


def even(count: int, seconds: float, **kinds: Any) -> list[tuple[float, signals.ClusterSignal]]:
    return [(i * seconds / count, signal(i, **kinds)) for i in range(count)]


def test_a_lone_urgent_event_is_triaged_lead_s_after_it_arrived():
    result = storm([(0.0, signal())])
    assert result.triages == [(LEAD, ["e-00000"])]


def test_a_five_minute_storm_is_read_three_times_as_without_the_leading_edge_and_its_first_event_at_once():
    urgent_storm = storm(even(1000, 300))
    routine_storm = storm(even(1000, 300, status="Healthy"))  # what every storm was before the leading edge
    # (a window message arrives on the whole second after its due time, as SQS delays are whole seconds)
    assert [t for t, _ in urgent_storm.triages] == pytest.approx([LEAD, LEAD + W, LEAD + 3 * W], abs=1)
    assert urgent_storm.reads == routine_storm.reads == 3
    assert urgent_storm.latency("e-00000") == LEAD and routine_storm.latency("e-00000") == W
    # every event handled exactly once
    handled = [e for _, ids in urgent_storm.triages for e in ids]
    assert sorted(handled) == sorted(urgent_storm.arrived) and len(handled) == 1000


@pytest.mark.parametrize("seconds", [1, 30, 99, 150, 199, 250, 300, 450, 900, 1800])
def test_a_storm_costs_at_most_one_read_more_than_before_and_none_once_it_outlasts_two_windows(seconds):
    events = max(2, seconds)
    led = storm(even(events, seconds))
    before = storm(even(events, seconds, status="Healthy"))
    assert led.reads <= before.reads + 1
    if seconds >= 2 * W:
        assert led.reads <= before.reads
    # the cluster is never read twice within a window: a run's reads are a window apart, the payback two
    starts = [t for t, _ in led.triages]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert all(gap >= W for gap in gaps)
    if len(gaps) >= 2:
        assert gaps[1] >= 2 * W
    assert led.latency("e-00000") == LEAD


def test_a_burst_shorter_than_a_window_gets_its_first_alert_at_once_and_the_rest_a_window_later():
    burst = storm(even(32, 10))  # a rack: 32 nodes within ten seconds
    [(first, early), (second, rest)] = burst.triages
    assert first == LEAD and early == [f"e-{i:05d}" for i in range(7)]  # those that arrived within LEAD s
    assert second == pytest.approx(LEAD + W, abs=1) and len(rest) == 25


def test_a_routine_event_first_delays_an_urgent_one_to_its_window_not_beyond():
    result = storm([(0.0, signal(1, status="Healthy")), (10.0, signal(2))])
    assert result.triages == [(W, ["e-00001", "e-00002"])]


# --- opening: one opener, nothing lost --------------------------------------------------------------------


def test_the_second_opener_finds_the_first_window_and_joins_it():
    table, queue = MemoryWindows(), SimQueue()
    first = windows.enqueue(signal(1), windows=table, queue=queue, now=at(0))
    second = windows.enqueue(signal(2), windows=table, queue=queue, now=at(0.5))
    assert first["leading"] is True and second["window"] == "joined the open window"
    assert len(queue.pending) == 1 and table.writes == 1


def test_a_record_that_keeps_changing_fails_the_event_after_the_attempts_with_the_event_kept():
    class Churning(MemoryWindows):
        def open(self, window, *, replacing):
            other = replace(window, window_id=f"{window.window_id}-x{self.writes}", due_at=at(-1000))
            self.writes += 1
            return windows.Opened(False, windows.LastWindow(other))  # stale each time: planned again

    table = Churning()
    with pytest.raises(windows.WindowContention):
        windows.enqueue(signal(1), windows=table, queue=SimQueue(), now=at(0))
    assert table.writes == windows.OPEN_ATTEMPTS and "e-00001" in table.events


def test_a_window_that_cannot_be_scheduled_puts_the_cooldown_back_and_fails_the_event():
    table = MemoryWindows()
    lead = windows.plan_window(signal(1), None, at(0))
    assert lead is not None
    table.record = claimed(lead, LEAD)
    with pytest.raises(RuntimeError, match="SQS refused"):
        windows.enqueue(signal(2), windows=table, queue=SimQueue(fail=True), now=at(30))
    assert table.record == claimed(lead, LEAD)  # the retry still sees the cooldown: it does not lead
    retried = windows.enqueue(signal(2), windows=table, queue=SimQueue(clock=31), now=at(31))
    assert retried["leading"] is False and parse_iso(retried["due_at"]) == at(LEAD + W)


def test_the_claim_is_when_the_window_function_ran_or_when_the_window_was_due():
    table = MemoryWindows()
    windows.enqueue(signal(1), windows=table, queue=SimQueue(), now=at(0))
    assert table.record is not None
    window = table.record.window
    windows.run_window(window, windows=table, run=lambda _: {}, keep_unreadable=lambda _: None)
    assert table.record.claimed_at == window.due_at
    table.record = windows.LastWindow(window)
    windows.run_window(window, windows=table, run=lambda _: {}, keep_unreadable=lambda _: None, now=at(40))
    assert table.record.claimed_at == at(40)
