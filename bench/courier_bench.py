"""Benchmark: the courier draining an alert storm from several clusters into one Slack webhook.

    .venv/bin/python bench/courier_bench.py --clusters 8 --messages 10

The real courier handler runs on the simulated account (moto: the outbox FIFO queue, its dead-letter
queue, the idempotency table) against the local Slack stand-in pacing its webhook as Slack does (one
message a second, a burst of three, anything faster answered 429 with Retry-After). Each cluster's
messages are queued together (one FIFO group each), and one poller per cluster plays Lambda's SQS event
source: receive a batch, invoke the courier, delete what succeeded, and, with nothing visible, look again
a second later.

Everything runs on one simulated clock. The pollers are threads, but only one runs at a time: a thread
runs until it sleeps on the clock (the courier waiting for its Slack slot, a Slack request taking
``--latency`` seconds, a poller finding the queue empty), and then the clock moves to the next thread due.
So concurrent invocations interleave where real ones would (at their waits), the run is reproducible, and
minutes of simulated traffic take seconds. The SQS clock (visibility, backoff), the Lambda context's
remaining time and the Slack stand-in's rate limit all read the same clock.

Prints one line: messages, delivered (and twice), Slack requests, 429s, dead-lettered, the simulated
seconds until the outbox was empty. Exits 1 when a message was not delivered exactly once.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import importlib.util
import itertools
import logging
import pathlib
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # functions/ and infra/ live in the repository, not in the installed package

from hyperpod_debugger.aws.clients import AwsClients  # noqa: E402
from hyperpod_sim import moto_patches  # noqa: E402
from hyperpod_sim.lambda_harness import (  # noqa: E402
    CapturedOutput,
    SqsEventSource,
    captured_powertools,
    lambda_context,
    monitor_harness,
)
from hyperpod_sim.slack_sink import RateLimit, SlackSink  # noqa: E402
from infra.constants import COURIER_TIMEOUT_S, OUTBOX_BATCH_SIZE  # noqa: E402

REGION = "us-west-2"
ACCOUNT = "111122223333"
#: The stack's courier settings (infra/constructs/notifications.py).
ENV = {"SLACK_TIMEOUT_S": "5", "PROBE_ENABLED": "false"}
#: The simulated clock's start (a fixed epoch time: the same run gives the same figures).
START = datetime(2026, 12, 3, 12, 0, tzinfo=UTC).timestamp()
#: Simulated seconds after which a run is abandoned (a courier that never drains the outbox).
GIVE_UP_S = 4 * 3600


class SimClock:
    """A simulated clock for cooperating threads: one runs at a time, until it calls :meth:`sleep`."""

    def __init__(self, start: float) -> None:
        self._now = start
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, int]] = []  # (wake at, order, worker)
        self._order = itertools.count()
        self._running: int | None = None
        self._me = threading.local()

    def now(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        me = getattr(self._me, "worker", None)
        if me is None:
            raise RuntimeError("SimClock.sleep outside a simulated thread")
        with self._cond:
            heapq.heappush(self._due, (self._now + max(float(seconds), 0.0), next(self._order), me))
            self._next()
            self._cond.wait_for(lambda: self._running == me)

    def _next(self) -> None:
        """Hand the clock to the thread due first (the lock is held)."""
        if self._due:
            at, _, worker = heapq.heappop(self._due)
            self._now = max(self._now, at)
            self._running = worker
        else:
            self._running = None
        self._cond.notify_all()

    def run(self, workers: list[Callable[[], None]]) -> None:
        errors: list[BaseException] = []

        def body(worker: int, target: Callable[[], None]) -> None:
            self._me.worker = worker
            with self._cond:
                self._cond.wait_for(lambda: self._running == worker)
            try:
                target()
            except BaseException as exc:  # noqa: BLE001 - re-raised by the main thread
                errors.append(exc)
            finally:
                with self._cond:
                    self._next()

        with self._cond:
            for worker in range(len(workers)):
                heapq.heappush(self._due, (self._now, next(self._order), worker))
        threads = [
            threading.Thread(target=body, args=(i, w), name=f"poller-{i}", daemon=True) for i, w in enumerate(workers)
        ]
        for thread in threads:
            thread.start()
        with self._cond:
            self._next()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]


class SimSqsClock:
    """Moto's SQS clock replaced by the simulated one (visibility, backoff, receive counts), for the block."""

    def __init__(self, clock: SimClock) -> None:
        import moto.sqs.models as sqs_models

        self._models = sqs_models
        self._real = (sqs_models.unix_time, sqs_models.unix_time_millis)
        self._sim = clock

    def __enter__(self) -> SimSqsClock:
        real_time, real_millis = self._real

        def unix_time(dt: Any = None) -> float:
            return real_time(dt) if dt is not None else self._sim.now()

        def unix_time_millis(dt: Any = None) -> float:
            return real_millis(dt) if dt is not None else self._sim.now() * 1000.0

        self._models.unix_time, self._models.unix_time_millis = unix_time, unix_time_millis
        return self

    def __exit__(self, *exc: object) -> None:
        self._models.unix_time, self._models.unix_time_millis = self._real


def courier_module(clock: SimClock) -> ModuleType:
    """A fresh copy of the courier's handler module: each poller is its own Lambda execution environment
    (the batch processor is module state), wired to the simulated clock where the courier takes one."""
    spec = importlib.util.find_spec("functions.monitor.handlers.outbox")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seams = {"clock": clock.now, "sleep": clock.sleep}
    module.__dict__.update({name: seam for name, seam in seams.items() if hasattr(module, name)})
    return module


def slack_payload(cluster: int, n: int) -> dict[str, Any]:
    text = f"cluster-{cluster}: finding {n}"
    return {"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]}


def queue_storm(clients: AwsClients, outbox_url: str, clusters: int, messages: int) -> int:
    from functions.monitor.adapters import SqsOutbox
    from functions.monitor.logic import outbox

    queue = SqsOutbox(clients, outbox_url)
    for c in range(clusters):
        arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/bench{c:08d}"
        for n in range(messages):
            record = f"{arn}#{n}"
            queue.put(
                outbox.OutboxMessage(
                    id=outbox.message_id("slack", [record]),
                    channel="slack",
                    group=arn,
                    key=f"single:{record}",
                    kind="single",
                    records=(record,),
                    created_at="2026-12-03T12:00:00+00:00",
                    slack=slack_payload(c, n),
                )
            )
    return clusters * messages


@contextlib.contextmanager
def slack_latency(clock: SimClock, seconds: float) -> Iterator[None]:
    """Each Slack request takes ``seconds`` on the simulated clock (the other pollers run meanwhile)."""
    from functions.monitor import adapters

    real = adapters.post_to_webhook

    def post(*args: Any, **kwargs: Any) -> Any:
        clock.sleep(seconds)
        return real(*args, **kwargs)

    adapters.post_to_webhook = post
    try:
        yield
    finally:
        adapters.post_to_webhook = real


@dataclass
class Figures:
    messages: int
    delivered: int
    twice: int
    requests: int
    throttled: int
    dead: int
    drained_s: float | None
    invocations: int


def run(
    clusters: int, messages: int, pollers: int, latency: float, idle_s: float, limit: RateLimit | None = None
) -> Figures:
    from moto import mock_aws

    moto_patches.apply()
    clock = SimClock(START)
    start = clock.now()
    sink = SlackSink(rate_limit=limit or RateLimit(), clock=clock.now)
    invocations = 0
    last_delete = [start]
    with mock_aws(), sink, SimSqsClock(clock):
        clients = AwsClients(REGION, max_attempts=1)
        with monitor_harness(clients, sink=sink, env=ENV) as monitor:
            total = queue_storm(clients, monitor.resources.outbox_url, clusters, messages)
            source = SqsEventSource(clients, monitor.resources.outbox_url, batch_size=OUTBOX_BATCH_SIZE)

            deleted = 0
            checked = [start]

            def remaining_ms(began: float) -> Callable[[], int]:
                """The invocation's remaining time on the simulated clock (Lambda's context counts real time)."""
                return lambda: max(0, int((COURIER_TIMEOUT_S - (clock.now() - began)) * 1000))

            def all_gone() -> bool:
                """Every message deleted; or, looked at twice a simulated minute (moto's depth is slow), none
                left at all (some may have moved to the dead-letter queue)."""
                if deleted >= total:
                    return True
                if clock.now() - checked[0] < 30:
                    return False
                checked[0] = clock.now()
                return source.depth() == 0

            def poller() -> None:
                nonlocal invocations, deleted
                module = courier_module(clock)
                while clock.now() - start < GIVE_UP_S:
                    event = source.poll()
                    if event is None:
                        if all_gone():
                            return
                        clock.sleep(idle_s)
                        continue
                    context = lambda_context("hyperpod-courier", region=REGION, timeout_s=COURIER_TIMEOUT_S)
                    context.__dict__["get_remaining_time_in_millis"] = remaining_ms(clock.now())
                    invocations += 1
                    response = module.handler(event, context)
                    gone, _ = source.settle(event, response)
                    if gone:
                        deleted += gone
                        last_delete[0] = clock.now()
                    clock.sleep(0)  # the next poll waits its turn behind the other pollers

            quiet = logging.getLogger("hyperpod_debugger.notify.slack")
            quiet.disabled = True  # each 429 is logged; the figures count them
            with captured_powertools(CapturedOutput()), slack_latency(clock, latency):
                clock.run([poller for _ in range(pollers)])
            quiet.disabled = False
            drained = source.depth() == 0
            dlq = clients.client("sqs").get_queue_attributes(
                QueueUrl=monitor.resources.outbox_dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]
            dead = int(dlq.get("ApproximateNumberOfMessages", 0))
    texts = Counter(str(p.get("text")) for p in sink.received)
    return Figures(
        messages=total,
        delivered=len(texts),
        twice=sum(n - 1 for n in texts.values()),
        requests=sink.requests,
        throttled=sink.throttled,
        dead=dead,
        drained_s=last_delete[0] - start if drained else None,
        invocations=invocations,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=8, help="clusters, one FIFO group each")
    parser.add_argument("--messages", type=int, default=10, help="Slack messages queued per cluster")
    parser.add_argument(
        "--pollers", type=int, default=None, help="concurrent courier invocations (default: one per cluster)"
    )
    parser.add_argument("--latency", type=float, default=0.2, help="simulated seconds one Slack request takes")
    parser.add_argument("--idle", type=float, default=1.0, help="simulated seconds a poller waits on an empty queue")
    parser.add_argument("--slack-rate", type=float, default=1.0, help="messages a second the Slack stand-in allows")
    parser.add_argument("--slack-burst", type=int, default=3, help="messages at once the Slack stand-in allows")
    args = parser.parse_args(argv)
    pollers = args.pollers or args.clusters
    began = time.perf_counter()
    limit = RateLimit(per_s=args.slack_rate, burst=args.slack_burst)
    f = run(args.clusters, args.messages, pollers, args.latency, args.idle, limit)
    drained = f"{f.drained_s:.0f} simulated s to drain" if f.drained_s is not None else "NOT drained"
    print(
        f"courier: {f.messages} Slack messages from {args.clusters} clusters, {pollers} concurrent pollers, Slack "
        f"allowing {limit.per_s:g}/s (burst {limit.burst}): "
        f"{f.delivered} delivered ({f.twice} twice), {f.requests} Slack requests, {f.throttled} 429s, "
        f"{f.dead} dead-lettered, {drained} ({f.invocations} invocations, {time.perf_counter() - began:.0f} s real)"
    )
    return 0 if f.delivered == f.messages and f.twice == 0 and f.dead == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
