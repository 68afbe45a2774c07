"""The Slack pace every courier shares, on the simulated account: the lanes in the idempotency table
(moto), and the courier handler against a Slack stand-in that answers 429 + Retry-After past about one
message a second per webhook, on a fake clock (the handler's ``clock`` and ``sleep``, and the stand-in's).

Messages are put in the outbox directly (as the notifier would queue them), one FIFO group per channel
and cluster, so these tests depend on the courier alone.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest
from botocore.exceptions import ClientError

from functions.monitor import adapters
from functions.monitor.adapters import SharedLanes
from functions.monitor.handlers import outbox as courier_handler
from functions.monitor.logic import outbox
from functions.monitor.logic.outbox import Lane, Pace
from hyperpod_sim import scenarios
from hyperpod_sim.lambda_harness import (
    SqsEventSource,
    captured_powertools,
    create_idempotency_table,
    lambda_context,
    monitor_harness,
)
from hyperpod_sim.slack_sink import WEBHOOK_PATH, RateLimit, SlackSink

T0 = 1_800_000_000.0
TABLE = "pacing-idempotency"
LANE = "slack#webhook-0123456789ab"
PACE = Pace(interval_s=1.0, burst=3)
ENV = {"PROBE_ENABLED": "false", "SLACK_TIMEOUT_S": "1"}
A = "arn:aws:sagemaker:us-west-2:111122223333:cluster/aaaaaaaaaaaa"
B = "arn:aws:sagemaker:us-west-2:111122223333:cluster/bbbbbbbbbbbb"
C = "arn:aws:sagemaker:us-west-2:111122223333:cluster/cccccccccccc"


class Clock:
    def __init__(self) -> None:
        self.t = T0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


# --------------------------------------------------------------------------- the lanes in the table


@pytest.fixture
def table(clients):
    create_idempotency_table(clients, TABLE)
    return TABLE


def lane_item(clients, lane: str = LANE) -> dict[str, Any]:
    return clients.client("dynamodb").get_item(TableName=TABLE, Key={"id": {"S": f"pace#{lane}"}}, ConsistentRead=True)[
        "Item"
    ]


def test_two_couriers_take_the_webhooks_slots_in_turn(clients, table):
    first, second = SharedLanes(clients, table), SharedLanes(clients, table)
    slots = [first.reserve(LANE, PACE, now=T0, within_s=30) for _ in range(3)]
    # the second courier has never seen the lane: its first write fails on the condition, which hands
    # back the lane as it is; the second write takes the slot after the first courier's burst
    slots.append(second.reserve(LANE, PACE, now=T0, within_s=30))
    # the first courier's view is stale now: one more conflict, then the next slot
    slots.append(first.reserve(LANE, PACE, now=T0, within_s=30))
    assert [(s.at - T0, s.reserved) for s in slots] == [(0, True), (0, True), (0, True), (1, True), (2, True)]
    assert (first.conflicts, second.conflicts) == (1, 1)
    item = lane_item(clients)
    assert float(item["due"]["N"]) == T0 + 5 and item["version"]["N"] == "5"
    assert int(item["expiration"]["N"]) >= T0 + 3600  # the table's TTL removes a lane nobody uses


def test_a_slot_too_far_away_is_not_taken(clients, table):
    lanes = SharedLanes(clients, table)
    for _ in range(10):
        lanes.reserve(LANE, PACE, now=T0, within_s=30)
    slot = lanes.reserve(LANE, PACE, now=T0, within_s=5)
    assert (slot.at - T0, slot.reserved) == (8, False)
    assert lane_item(clients)["version"]["N"] == "10"


def test_a_retry_after_one_courier_heard_holds_every_courier(clients, table):
    first, second = SharedLanes(clients, table), SharedLanes(clients, table)
    first.reserve(LANE, PACE, now=T0, within_s=30)
    first.block(LANE, PACE, until=T0 + 7)
    assert second.reserve(LANE, PACE, now=T0 + 2, within_s=3) == outbox.Slot(T0 + 7, reserved=False)
    assert second.reserve(LANE, PACE, now=T0 + 2, within_s=30) == outbox.Slot(T0 + 7, reserved=True)
    # after the block the webhook gets no burst: one slot a second
    assert first.reserve(LANE, PACE, now=T0 + 2, within_s=30) == outbox.Slot(T0 + 8, reserved=True)
    assert float(lane_item(clients)["blocked_until"]["N"]) == T0 + 7


def test_the_lanes_leave_the_tables_other_items_alone(clients, table):
    ddb = clients.client("dynamodb")
    mine = {"id": {"S": "hyperpod-courier#5f2b"}, "expiration": {"N": "1"}, "status": {"S": "COMPLETED"}}
    ddb.put_item(TableName=TABLE, Item=mine)
    ddb.put_item(TableName=TABLE, Item={"id": {"S": "sent#abc"}, "expiration": {"N": "2"}})
    SharedLanes(clients, table).reserve(LANE, PACE, now=T0, within_s=30)
    items = {i["id"]["S"]: i for i in ddb.scan(TableName=TABLE)["Items"]}
    assert set(items) == {"hyperpod-courier#5f2b", "sent#abc", f"pace#{LANE}"}
    assert items["hyperpod-courier#5f2b"] == mine


def test_without_its_table_a_courier_paces_itself_after_one_failed_call(clients):
    lanes = SharedLanes(clients, "no-such-table")
    calls: list[str] = []
    clients.client("dynamodb").meta.events.register(
        "before-call.dynamodb.UpdateItem", lambda **_: calls.append("UpdateItem")
    )
    slots = [lanes.reserve(LANE, PACE, now=T0, within_s=30).at - T0 for _ in range(5)]
    lanes.block(LANE, PACE, until=T0 + 10)
    assert slots == [0, 0, 0, 1, 2]
    assert lanes.reserve(LANE, PACE, now=T0, within_s=30).at == T0 + 10
    assert len(calls) == 1 and lanes.errors == ["lane: ResourceNotFoundException"]


def test_endless_contention_gives_up_after_a_few_writes():
    class Contended:
        """Every write loses to another courier, which has just moved the lane on."""

        def __init__(self) -> None:
            self.calls = 0

        def update_item(self, **_: Any) -> None:
            self.calls += 1
            item = {"due": {"N": str(T0 + self.calls)}, "blocked_until": {"N": "0"}, "version": {"N": str(self.calls)}}
            raise ClientError(
                {"Error": {"Code": "ConditionalCheckFailedException", "Message": "lost"}, "Item": item}, "UpdateItem"
            )

    lanes = SharedLanes.__new__(SharedLanes)
    SharedLanes.__init__(lanes, _Clients(Contended()), TABLE)
    slot = lanes.reserve(LANE, PACE, now=T0, within_s=30)
    assert not slot.reserved and slot.at >= T0 + 1
    assert lanes._ddb.calls == SharedLanes.TRIES and lanes.errors == []


class _Clients:
    def __init__(self, ddb: Any) -> None:
        self._ddb = ddb

    def client(self, service: str) -> Any:
        return self._ddb


def test_the_lane_survives_a_damaged_item(clients, table):
    clients.client("dynamodb").put_item(
        TableName=TABLE, Item={"id": {"S": f"pace#{LANE}"}, "due": {"S": "soon"}, "version": {"N": "4"}}
    )
    slot = SharedLanes(clients, table).reserve(LANE, PACE, now=T0, within_s=30)
    assert slot == outbox.Slot(T0, reserved=True)
    assert SharedLanes._parse(lane_item(clients))[0] == Lane(due=T0 + 1, blocked_until=0.0)


# --------------------------------------------------------------------------- the courier handler


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(courier_handler, "clock", fake.now)
    monkeypatch.setattr(courier_handler, "sleep", fake.sleep)
    return fake


@pytest.fixture
def sqs_on_the_clock(aws, clock, monkeypatch):
    """SQS's time (visibility, backoff) is the fake clock's: a message backed off 5 s stays away until the
    clock has moved 5 s, however long the test takes."""
    import moto.sqs.models as sqs_models

    real_time, real_millis = sqs_models.unix_time, sqs_models.unix_time_millis
    monkeypatch.setattr(sqs_models, "unix_time", lambda dt=None: real_time(dt) if dt is not None else clock.t)
    monkeypatch.setattr(
        sqs_models, "unix_time_millis", lambda dt=None: real_millis(dt) if dt is not None else clock.t * 1000
    )


@pytest.fixture
def monitor(aws, clients, clock, sqs_on_the_clock):
    with SlackSink(rate_limit=RateLimit(per_s=1.0, burst=3), clock=clock.now) as sink:
        with monitor_harness(clients, sink=sink, env=ENV) as harness:
            yield harness


@pytest.fixture
def backoffs(monkeypatch) -> list[int]:
    """The visibility (seconds) the courier gave each message it left in the queue, in order."""
    seen: list[int] = []
    real = adapters.SqsOutbox.backoff

    def backoff(self: adapters.SqsOutbox, receipt_handle: str, seconds: int) -> bool:
        seen.append(seconds)
        return real(self, receipt_handle, seconds)

    monkeypatch.setattr(adapters.SqsOutbox, "backoff", backoff)
    return seen


def queue(monitor, channel: str, cluster: str, n: int) -> str:
    key = f"{cluster.rsplit('/', 1)[-1]}-{channel}-{n}"
    adapters.SqsOutbox(monitor.clients, monitor.resources.outbox_url).put(
        outbox.OutboxMessage(
            id=outbox.message_id(channel, [key]),
            channel=channel,
            group=cluster,
            key=key,
            kind="single",
            records=(key,),
            created_at="2026-12-03T12:00:00+00:00",
            slack={"text": key, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": key}}]}
            if channel == "slack"
            else None,
            subject=key if channel == "sns" else None,
            body=key if channel == "sns" else None,
        )
    )
    return key


def invoke(monitor, source: SqsEventSource, clock: Clock, *, timeout_s: float = 60) -> tuple[list[str], Any]:
    """One courier invocation over one batch, its remaining time counted on the fake clock (the message keys
    it held, and its response)."""
    event = source.poll()
    assert event is not None
    keys = [json.loads(r["body"])["key"] for r in event["Records"]]
    context = lambda_context("hyperpod-courier", region=scenarios.REGION, timeout_s=timeout_s)
    began = clock.t
    context.__dict__["get_remaining_time_in_millis"] = lambda: max(0, int((timeout_s - (clock.t - began)) * 1000))
    with captured_powertools(monitor.output):
        response = courier_handler.handler(event, context)
    source.settle(event, response)
    return keys, response


def slack_times(monitor) -> list[tuple[float, int]]:
    return [(t - T0, status) for t, status in monitor.sink.log]


def test_couriers_of_two_clusters_share_the_webhooks_pace_and_meet_no_429(monitor, clock):
    for cluster in (A, B):
        for n in range(4):
            queue(monitor, "slack", cluster, n)
    source = SqsEventSource(monitor.clients, monitor.resources.outbox_url, batch_size=4)
    first, _ = invoke(monitor, source, clock)
    second, _ = invoke(monitor, source, clock)  # another invocation: the table is all they share
    assert all("aaaa" in k for k in first) and all("bbbb" in k for k in second)
    # the burst, then one a second, across both invocations; Slack never had to say 429
    assert slack_times(monitor) == [(0, 200), (0, 200), (0, 200), (1, 200), (2, 200), (3, 200), (4, 200), (5, 200)]
    assert monitor.sink.throttled == 0 and clock.sleeps == [1, 1, 1, 1, 1]
    assert monitor.outbox.depth() == 0
    # the lane is named by the webhook's hash: the URL is in no item and no log line
    items = monitor.clients.client("dynamodb").scan(TableName=monitor.resources.idempotency_table)["Items"]
    lanes = [i["id"]["S"] for i in items if i["id"]["S"].startswith("pace#")]
    assert len(lanes) == 1 and lanes[0].startswith("pace#slack#webhook-")
    secret = WEBHOOK_PATH.rsplit("/", 1)[-1]
    assert secret not in json.dumps(items) and secret not in json.dumps(monitor.logs)


def test_a_retry_after_holds_every_cluster_for_what_is_left_of_it_and_never_the_email(monitor, clock, backoffs):
    # GIVEN Slack answers the first post 429, Retry-After 7
    monitor.sink.fail_next(1, status=429, retry_after=7)
    for cluster in (A, B, C):
        queue(monitor, "slack", cluster, 0)
        queue(monitor, "sns", cluster, 0)
    source = SqsEventSource(monitor.clients, monitor.resources.outbox_url, batch_size=2)
    # WHEN cluster A's courier meets the 429
    first, response = invoke(monitor, source, clock)
    assert len(response["batchItemFailures"]) == 1
    # THEN its message waits the 7 s Slack asked for, not the exponential 60
    assert backoffs == [7]
    # WHEN cluster B's courier runs two seconds later with too little time to wait out the block
    clock.t = T0 + 2
    second, response = invoke(monitor, source, clock, timeout_s=5)  # a send needs 1 + 3 s: 1 s to spare
    # THEN its Slack message waits what is left of the block, 5 s, and its email goes at once
    assert len(response["batchItemFailures"]) == 1 and backoffs == [7, 5]
    assert len(monitor.emails()) == 2
    # WHEN cluster C's courier has the time: it sleeps until the block ends, then posts once
    third, response = invoke(monitor, source, clock)
    assert response == {"batchItemFailures": []} and clock.sleeps == [5]
    assert slack_times(monitor) == [(0, 429), (7, 200)]
    assert [m["text"] for m in monitor.sink.received] == [k for k in third if "slack" in k]
    # AND once their waits are over, the two that waited come back (one batch) and go, one a second, each once
    clock.t = T0 + 8
    fourth, response = invoke(monitor, source, clock)
    assert response == {"batchItemFailures": []} and len(fourth) == 2
    assert slack_times(monitor)[2:] == [(8, 200), (9, 200)] and clock.sleeps == [5, 1]
    assert sorted(m["text"] for m in monitor.sink.received) == sorted(k for k in first + second + third if "slack" in k)
    assert monitor.outbox.depth() == 0 and len(monitor.emails()) == 1


def test_a_storm_through_one_courier_never_trips_the_webhooks_limit(monitor, clock, backoffs):
    # more Slack messages than one invocation has slots for: the rest wait in the queue for their slot
    keys = deque(queue(monitor, "slack", A, n) for n in range(10))
    source = SqsEventSource(monitor.clients, monitor.resources.outbox_url, batch_size=10)
    _, response = invoke(monitor, source, clock, timeout_s=10)  # 6 s beyond what a send needs
    sent = len(monitor.sink.received)
    # the burst of three, then one a second for the 6 s to spare: the tenth's slot is past the invocation
    assert monitor.sink.throttled == 0 and sent == 9 and clock.sleeps == [1] * 6
    assert len(response["batchItemFailures"]) == 10 - sent
    assert [m["text"] for m in monitor.sink.received] == [keys.popleft() for _ in range(sent)]
    assert set(backoffs) == {1}
