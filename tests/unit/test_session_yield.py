"""The probe runner yields StartSession to people while Session Manager throttles (issue 27, item 8): the pace
halves on throttled answers, climbs back slowly, never starts a call at or after its round's close, and a
batch says which nodes it left for the next sweep, never as a verdict on them. Everything runs on a simulated
clock that moves only when the pace waits: the times asserted are the pace's decisions, not wall time."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest

from hyperpod_debugger.aws.ssm_types import CommandResult
from hyperpod_debugger.domain.model import CheckStatus, Tag
from hyperpod_debugger.probe import pace as pacing
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.probe.pace import PaceClock, PaceReport, SessionPace
from hyperpod_debugger.probe.runner import probe_cluster
from tests import builders as b

DOC = json.dumps(
    {"schema_version": 1, "hostname": "h", "collected_at": "2026-11-30T12:00:00Z", "uptime_s": 1.0, "items": {}}
).encode()


class SimClock:
    """Seconds that pass only when someone waits on this clock; ``at`` runs a callback once the clock reaches
    a time (what the account did meanwhile: a throttled answer)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._events: list[tuple[float, Callable[[], object]]] = []

    def at(self, when: float, action: Callable[[], object]) -> None:
        self._events.append((when, action))

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        for event in [e for e in self._events if e[0] <= self.now]:
            self._events.remove(event)
            event[1]()
        await asyncio.sleep(0)

    def clock(self) -> PaceClock:
        return PaceClock(monotonic=lambda: self.now, sleep=self.sleep, wall=lambda: b.NOW + timedelta(seconds=self.now))


def _starts(pace: SessionPace, sim: SimClock, calls: int, before_each=None) -> list[float]:  # noqa: ANN001
    """Ask the pace for ``calls`` starts one after another; the times they were allowed (until one is refused)."""

    async def main() -> list[float]:
        times = []
        for i in range(calls):
            if before_each is not None:
                before_each(i)
            if not await pace.start():
                break
            times.append(round(sim.now, 6))
        return times

    return asyncio.run(main())


def test_without_throttling_the_pace_is_the_batch_rate():
    sim, throttled = SimClock(), Counter()
    pace = SessionPace(2.0, throttled=lambda: throttled["n"], clock=sim.clock())
    assert _starts(pace, sim, 6) == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    report = pace.report()
    assert (report.ceiling, report.lowest, report.final, report.throttles, report.started) == (2.0, 2.0, 2.0, 0, 6)
    assert not report.yielded and pace.changes == []


def test_a_throttled_answer_halves_the_pace_for_the_rest_of_the_batch():
    sim, throttled = SimClock(), Counter()
    pace = SessionPace(1.0, throttled=lambda: throttled["n"], clock=sim.clock())

    def account(i: int) -> None:
        if i == 3:  # the third session's StartSession was throttled twice before botocore got it through
            throttled["n"] += 2

    assert _starts(pace, sim, 7, account) == [0.0, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert pace.changes == [(2.0, 0.5)] and pace.throttles == 2
    assert pace.report().yielded and pace.report().lowest == 0.5


def test_one_congestion_halves_once_persistent_throttling_halves_again_down_to_the_floor():
    sim, throttled = SimClock(), Counter()
    pace = SessionPace(1.0, throttled=lambda: throttled["n"], clock=sim.clock())

    def account(i: int) -> None:
        throttled["n"] += 1  # every call is throttled (people keep the account at its rate)

    _starts(pace, sim, 12, account)
    rates = [rate for _, rate in pace.changes]
    # throttles within the hold after a halving count once; each later one halves again; never below the floor
    assert rates == [0.5, 0.25, 0.125] and pace.rate == 1.0 * pacing.YIELD_FLOOR
    times = [t for t, _ in pace.changes]
    assert all(later - earlier >= pacing.YIELD_HOLD_S for earlier, later in zip(times, times[1:], strict=False))
    assert pace.throttles == 12


def test_the_pace_climbs_back_slowly_once_the_throttling_stops_and_never_above_the_batch_rate():
    sim, throttled = SimClock(), Counter()
    pace = SessionPace(1.0, throttled=lambda: throttled["n"], clock=sim.clock())
    sim.at(0.5, lambda: throttled.update(n=1))  # one throttled answer while the second call waits

    times = _starts(pace, sim, 60)

    first_change, *climb = pace.changes
    # seen by the waiting call when its turn came: it halved the pace and went out a second later itself
    assert first_change == (1.0, 0.5)
    assert times[:3] == [0.0, 2.0, 4.0]
    # quiet stretches of RECOVER_AFTER_S add RECOVER_STEP of the rate each, back to it and no further
    steps = [round(rate, 6) for _, rate in climb]
    assert steps == [0.625, 0.75, 0.875, 1.0]
    assert all(t - 1.0 >= (i + 1) * pacing.RECOVER_AFTER_S for i, (t, _) in enumerate(climb))
    gaps = [round(b2 - a2, 6) for a2, b2 in zip(times, times[1:], strict=False)]
    assert min(gaps) == 1.0 and gaps[-1] == 1.0  # back at the batch's rate, never faster


def test_no_call_starts_at_or_after_the_rounds_close():
    sim, throttled = SimClock(), Counter()
    pace = SessionPace(1.0, throttled=lambda: throttled["n"], clock=sim.clock(), deadline=4.5)
    assert _starts(pace, sim, 10) == [0.0, 1.0, 2.0, 3.0, 4.0]
    # refused at once, without waiting for a turn that would come too late
    assert sim.now == 4.0 and pace.started == 5

    sim2 = SimClock()
    slowed = SessionPace(1.0, throttled=lambda: throttled["n"], clock=sim2.clock(), deadline=4.5)
    throttled["n"] += 1  # after the pace took its count: one throttled answer before the second call
    assert _starts(slowed, sim2, 10) == [0.0, 2.0, 4.0]


def test_waiting_calls_keep_their_order_and_the_spacing():
    sim, throttled = SimClock(), Counter()
    pace = SessionPace(4.0, throttled=lambda: throttled["n"], clock=sim.clock())
    order: list[tuple[int, float]] = []

    async def one(i: int) -> None:
        assert await pace.start()
        order.append((i, sim.now))

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(5)))

    asyncio.run(main())
    assert order == [(0, 0.0), (1, 0.25), (2, 0.5), (3, 0.75), (4, 1.0)]


def test_the_pace_refuses_a_ceiling_of_zero():
    with pytest.raises(ValueError):
        SessionPace(0, throttled=lambda: 0)


# --------------------------------------------------------------------------- a probe run that yields


class _Clients:
    """What the pace reads of ``AwsClients``: the running count of throttled answers per IAM action."""

    def __init__(self) -> None:
        self.throttles: Counter[str] = Counter()


def _probe(throttled_first: int, *, close_after: float = 0.45):
    """Eight nodes at 20 sessions a second, one at a time, in a round that closes ``close_after`` simulated
    seconds in: the first StartSession is answered ``throttled_first`` throttles before it goes through (what
    botocore's retries see and ``AwsClients`` counts). Returns the run, the targets the fake Session Manager
    got and what the batch was told of the pace."""
    sim, clients = SimClock(), _Clients()
    called: list[str] = []
    nodes = [b.node(f"i-{i:017x}") for i in range(8)]

    async def run(target: str, command: str) -> CommandResult:
        if not called:
            clients.throttles[pacing.START_SESSION] += throttled_first
        called.append(target)
        return CommandResult(0, DOC, b"")

    told: list[PaceReport] = []
    options = ProbeOptions(
        max_nodes=8,
        rate=20.0,
        concurrency=1,
        start_until=b.NOW + timedelta(seconds=close_after),
        clock=sim.clock(),
        on_pace=told.append,
    )
    probed = probe_cluster(
        clients,  # type: ignore[arg-type]
        b.cluster(),
        nodes,
        b.NOW,
        focus=(),
        suspects=[],
        controllers=set(),
        options=options,
        runner_factory=lambda *_: run,
    )
    return probed, nodes, called, told


def test_a_batch_that_is_not_throttled_probes_every_node_of_its_round():
    probed, nodes, called, [told] = _probe(0)
    assert probed.probed == [n.instance_id for n in nodes] and len(called) == 8
    assert told.not_started == () and not told.yielded
    [session] = [c for c in probed.coverage if c.check == "probe.session"]
    assert "not started" not in session.reason


def test_a_throttled_batch_slows_down_and_leaves_the_rest_due_saying_so_never_as_a_verdict():
    probed, nodes, called, [told] = _probe(2)

    # halved to 10/s: starts at 0, .1, .2, .3, .4 of a round that closes at .45; the last three wait
    ids = [n.instance_id for n in nodes]
    assert probed.probed == ids[:5] and len(called) == 5
    assert told.not_started == tuple(ids[5:]) and told.throttles == 2
    assert (told.ceiling, told.lowest) == (20.0, 10.0) and told.yielded
    assert probed.pace == told
    # the nodes left are not probed, carry no finding (no PASS, no UNKNOWN): the next sweep probes them
    left = set(ids[5:])
    assert not any(f.instance_id in left for f in probed.findings)
    assert all(f.tag is not Tag.PASS for f in probed.findings if f.instance_id in left)
    [session] = [c for c in probed.coverage if c.check == "probe.session"]
    assert session.status is CheckStatus.RAN
    assert "3 not started before the window closed: Session Manager throttled StartSession 2 time(s)" in session.reason
    assert "slowed from 20.00/s to 10.00/s" in session.reason and "lead the next plan" in session.reason


def test_a_batch_whose_round_closed_before_any_session_concludes_nothing():
    probed, nodes, called, [told] = _probe(0, close_after=0.0)
    assert probed.probed == [] and called == [] and len(told.not_started) == 8
    [session] = [c for c in probed.coverage if c.check == "probe.session"]
    assert session.status is CheckStatus.UNKNOWN and "none started; 8 not started" in session.reason
    assert not probed.findings
