"""Every entry point of the monitor, fuzzed with mutated real events of its own kind, against moto.

Each handler module of ``functions/monitor/handlers/`` gets what its trigger really delivers, mutated (a key
deleted, a value replaced by another type, a lone surrogate, a huge string, a record without its id, an empty
batch): EventBridge events (the published ones in ``tests/events/published/`` and ``tests/events/*.json``), the
CloudWatch Logs subscription payload (``tests/events/hma_log_subscription.json``), SQS records wrapping window,
alert-group and outbox messages, DynamoDB stream records (``tests/events/stream/``) and the Step Functions
inputs of the sweep and its probes. Whatever the input:

* no exception escapes (none of these handlers documents a retryable one for such input: the only ones they
  raise are a failed triage and an unprocessed-events queue that refuses what it is asked to keep);
* a batch handler answers a valid partial batch response, whose identifiers are all records of the batch;
* in a batch with one bad item, the good items are still processed (their effect is checked).

The three failures a review found on the simulated account have their own regression tests at the end.
"""

from __future__ import annotations

import base64
import copy
import gzip
import itertools
import json
import pathlib
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from functions.monitor import handlers
from functions.monitor.logic import windows as window_logic
from functions.shared.odd_input import REPLACEMENT, without_surrogates
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.lifecycle.findings import State, StoredFinding
from hyperpod_debugger.store.findings import to_item, typed
from hyperpod_sim import moto_patches, scenarios
from hyperpod_sim.lambda_harness import MonitorHarness, monitor_harness

EVENTS = pathlib.Path(__file__).resolve().parents[1] / "events"
HYPERPOD_EVENTS = sorted(
    [p for p in (EVENTS / "published").glob("*.json")] + [p for p in EVENTS.glob("hyperpod_*.json")],
    key=lambda p: p.name,
)
STREAM_CAPTURE = json.loads((EVENTS / "stream" / "dynamodb-stream-capture.json").read_text())
HMA_DOCUMENT = json.loads((EVENTS / "hma_log_subscription.json").read_text())
ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/lw12e0dn1hhd"
NODE = "i-0391f86fa0fe0d465"
HUGE = "x" * 60_000

#: Strings a real sender never meant but a handler may still be handed.
ODD_TEXT = st.sampled_from(["\ud800", "a\udc80b", "\x00", "\u202e", "🙂", "", " ", HUGE, "i-0123456789abcdef0"])
ODD = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | ODD_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8) | ODD_TEXT, inner, max_size=3),
    max_leaves=8,
)
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
_ids = itertools.count(1)
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")


# --------------------------------------------------------------------------- the simulated account


class _Monitor:
    """The harness, named in a falsifying example by a word, not by every log line it captured."""

    def __init__(self, harness: MonitorHarness) -> None:
        self.harness = harness

    def __getattr__(self, name: str) -> Any:
        return getattr(self.harness, name)

    def __repr__(self) -> str:
        return "<monitor on moto>"


@pytest.fixture(scope="module")
def monitor():
    """The monitor's resources on moto, events coalesced into windows as the stack deploys them; probes off."""
    moto_patches.apply()
    with mock_aws():
        clients = AwsClients(scenarios.REGION, max_attempts=1)
        with monitor_harness(clients, coalesce=True, env={"PROBE_ENABLED": "false"}) as harness:
            harness.output.keep = 200  # a few thousand invocations: only the latest lines are read
            yield _Monitor(harness)


def queue_depth(monitor: MonitorHarness, url: str) -> int:
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    got = monitor.clients.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return sum(int(got.get(n, 0)) for n in names)


def drain(monitor: MonitorHarness, url: str) -> list[dict[str, Any]]:
    sqs, out = monitor.clients.client("sqs"), []
    while got := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=0
    ).get("Messages", []):
        for message in got:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        out.extend(got)
    return out


# --------------------------------------------------------------------------- mutation


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


def mutate(data: st.DataObject, document: Any, rounds: int = 2) -> Any:
    """``document`` with a few of its keys deleted, its values replaced by odd ones or odd keys added."""
    document = copy.deepcopy(document)
    for _ in range(data.draw(st.integers(1, rounds))):
        path = data.draw(st.sampled_from(_paths(document)))
        if not path:
            if data.draw(st.booleans()):
                return data.draw(ODD)
            continue
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        operation = data.draw(st.sampled_from(["replace", "delete", "add"]))
        if operation == "replace":
            parent[path[-1]] = data.draw(ODD)
        elif operation == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[data.draw(st.text(max_size=8) | ODD_TEXT)] = data.draw(ODD)
        else:
            parent.append(data.draw(ODD))
    return document


def assert_partial_response(response: Any, batch: Any) -> None:
    """A valid partial batch response, naming only records of the batch (by the id the service reads)."""
    assert isinstance(response, dict) and set(response) == {"batchItemFailures"}
    records = batch.get("Records") if isinstance(batch, dict) else None
    names = set()
    for record in records if isinstance(records, list) else []:
        if isinstance(record, dict):
            images = record.get("dynamodb")
            for name in (record.get("messageId"), images.get("SequenceNumber") if isinstance(images, dict) else None):
                if isinstance(name, str):
                    names.add(name)
    for failure in response["batchItemFailures"]:
        identifier = failure["itemIdentifier"]
        assert isinstance(identifier, str) and identifier.strip(), failure
        assert without_surrogates(identifier) in {without_surrogates(n) for n in names}


def sqs_records(bodies: list[Any], *, queue: str = "hyperpod-debugger-event-windows") -> dict[str, Any]:
    """Lambda's SQS event for these bodies (what the harness's ``sqs_record`` shapes)."""
    return {
        "Records": [
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": f"handle-{next(_ids)}",
                "body": body if isinstance(body, str) else json.dumps(body),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1780334425000"},
                "messageAttributes": {},
                "md5OfBody": "0" * 32,
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:us-west-2:123456789012:{queue}",
                "awsRegion": "us-west-2",
            }
            for body in bodies
        ]
    }


def subscription(document: Any) -> dict[str, Any]:
    """CloudWatch Logs' subscription event for a decoded document."""
    text = json.dumps(document) if not isinstance(document, bytes) else document
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    return {"awslogs": {"data": base64.b64encode(gzip.compress(raw)).decode()}}


def finding_record(sequence: str, *, fingerprint: str | None = None) -> dict[str, Any]:
    """The captured stream record's envelope carrying a NEW finding as the store writes it, of a cluster of its
    own (the outbox is FIFO by cluster: a message the courier left in flight holds back only its own cluster)."""
    at = datetime.now(UTC).isoformat()
    finding = StoredFinding(
        fingerprint=fingerprint or uuid.uuid4().hex,
        cluster_arn=f"{ARN[: -len('lw12e0dn1hhd')]}fz{next(_ids):010d}",
        instance_id=NODE,
        check="probe.xid",
        section="G.1",
        tag=Tag.FAIL,
        priority=Priority.P0,
        state=State.OPEN,
        first_seen=at,
        last_seen=at,
        count=1,
        message="Xid 79 on GPU 3",
        evidence=("NVRM: Xid 79, GPU has fallen off the bus.",),
    )
    record = copy.deepcopy(STREAM_CAPTURE["Records"][1])  # the INSERT
    new = to_item(finding) | {"last_transition": "NEW", "last_transition_at": at}
    record["dynamodb"].update(NewImage=typed(new), Keys=typed({"pk": new["pk"], "sk": new["sk"]}))
    record["dynamodb"]["SequenceNumber"] = sequence
    return record


def sequence() -> str:
    return str(9_000_000_000_000_000 + next(_ids))


# --------------------------------------------------------------------------- EventBridge: events


@FUZZ
@given(path=st.sampled_from(HYPERPOD_EVENTS), data=st.data())
def test_the_event_handler_queues_ignores_or_rejects_any_mutated_event(monitor, path, data):
    event = mutate(data, json.loads(path.read_text()))
    result = monitor.invoke(handlers.event_handler, event)
    assert isinstance(result, dict) and result["status"] in {"queued", "ignored", "rejected"}
    if result["status"] == "rejected":
        assert result["errors"] and all(e["error"] for e in result["errors"])
        assert result["kept"] is True
    json.dumps(result).encode("utf-8")  # what it returns can be logged and sent as it is


# --------------------------------------------------------------------------- CloudWatch Logs: hma


@FUZZ
@given(data=st.data())
def test_the_log_subscription_handler_reads_any_mutated_payload_or_rejects_it(monitor, data):
    document = mutate(data, HMA_DOCUMENT, rounds=3)
    envelope = data.draw(
        st.sampled_from(["document", "not-base64", "not-gzip", "not-utf8", "mutated-envelope"]),
    )
    if envelope == "document":
        event = subscription(document)
    elif envelope == "not-base64":
        event = {"awslogs": {"data": "%%%\ud800"}}
    elif envelope == "not-gzip":
        event = {"awslogs": {"data": base64.b64encode(b"plain text").decode()}}
    elif envelope == "not-utf8":
        event = subscription(b"\xff\xfe{\x80}")
    else:
        event = mutate(data, subscription(HMA_DOCUMENT))
    result = monitor.invoke(handlers.log_subscription, event)
    assert isinstance(result, dict) and result["status"] in {"queued", "ignored", "rejected", "skipped"}
    json.dumps(result).encode("utf-8")


# --------------------------------------------------------------------------- SQS: windows and alert groups


def window_message() -> dict[str, str]:
    now = datetime.now(UTC)
    return window_logic.Window(ARN, "us-west-2", f"w-{next(_ids)}", now, now).message()


def group_message() -> dict[str, str]:
    return {"cluster_arn": ARN, "region": "us-west-2", "window_id": f"g-{next(_ids)}", "cluster_name": "sample"}


@FUZZ
@given(data=st.data())
def test_the_window_handler_answers_a_valid_partial_response_to_any_mutated_batch(monitor, data):
    event = mutate(data, sqs_records([window_message(), json.dumps(window_message())]), rounds=3)
    response = monitor.invoke(handlers.event_window, event)
    assert_partial_response(response, event)


@FUZZ
@given(data=st.data())
def test_the_alert_group_handler_answers_a_valid_partial_response_to_any_mutated_batch(monitor, data):
    base = sqs_records([group_message(), group_message()], queue="hyperpod-debugger-alert-groups")
    event = mutate(data, base, rounds=3)
    response = monitor.invoke(handlers.alert_groups, event)
    if isinstance(event, dict) and event.get("detail-type") == "Scheduled Event":
        return  # the daily summary, not a batch
    assert_partial_response(response, event)


@FUZZ
@given(data=st.data())
def test_the_alert_group_handler_answers_any_mutated_schedule(monitor, data):
    event = mutate(data, json.loads((EVENTS / "scheduled_event.json").read_text()))
    result = monitor.invoke(handlers.alert_groups, event)
    if isinstance(event, dict) and event.get("detail-type") == "Scheduled Event":
        assert isinstance(result, dict) and isinstance(result["queued"], int)  # the daily summary
    else:
        assert_partial_response(result, event)  # not the schedule: read as a batch, which holds no record


# --------------------------------------------------------------------------- DynamoDB stream


@FUZZ
@given(data=st.data())
def test_the_stream_handler_answers_a_valid_partial_response_to_any_mutated_batch(monitor, data):
    records = [copy.deepcopy(r) for r in STREAM_CAPTURE["Records"]] + [finding_record(sequence())]
    event = mutate(data, {"Records": records}, rounds=3)
    response = monitor.invoke(handlers.stream_notifier, event)
    assert_partial_response(response, event)


# --------------------------------------------------------------------------- SQS FIFO: the outbox


@FUZZ
@given(data=st.data())
def test_the_courier_answers_a_valid_partial_response_to_any_mutated_batch(monitor, data):
    # a real outbox message: what the notifier queued for a finding transition, alone in the queue
    drain(monitor, monitor.resources.outbox_url)
    monitor.invoke(handlers.stream_notifier, {"Records": [finding_record(sequence())]})
    polled = monitor.outbox.poll()
    assert polled is not None and len(polled["Records"]) == 1
    event = mutate(data, polled, rounds=3)
    response = monitor.invoke(handlers.courier, event)
    assert_partial_response(response, event)
    monitor.outbox.settle(polled, response)
    drain(monitor, monitor.resources.outbox_url)


# --------------------------------------------------------------------------- Step Functions: sweep and probes


@FUZZ
@given(data=st.data())
def test_the_sweep_step_answers_any_mutated_input(monitor, data):
    item = {
        "cluster_arn": ARN,
        "cluster_name": "sample-cluster",
        "sweep_id": "sweep-2026-12-04T10-00",
        "clusters": 2,
        "sweep_started": "2026-12-04T10:00:00+00:00",
    }
    result = monitor.invoke(handlers.sweep_cluster, mutate(data, item))
    assert isinstance(result, dict) and result["status"] in {"processed", "rejected", "skipped", "error"}
    assert isinstance(result.get("batches", []), list)


@FUZZ
@given(data=st.data(), by_reference=st.booleans())
def test_the_probe_step_answers_any_mutated_input(monitor, data, by_reference):
    item: dict[str, Any] = {"cluster_arn": ARN, "cluster_name": "sample-cluster"}
    if by_reference:
        item |= {"sweep_id": "sweep-2026-12-04T10-00", "batch": 0, "start_at": "2026-12-04T10:01:00+00:00"}
    else:
        item["nodes"] = [{"instance_id": NODE, "group": "worker-group-1", "status": "Running"}]
    result = monitor.invoke(handlers.probe_batch, mutate(data, item))
    assert isinstance(result, dict) and result["status"] in {"processed", "rejected", "error"}


# --------------------------------------------------------------------------- empty batches and records without ids


@pytest.mark.parametrize("entry", ["event_window", "alert_groups", "stream_notifier", "courier"])
@pytest.mark.parametrize(
    "event",
    [{"Records": []}, {}, {"Records": "nope"}, {"Records": [None, 3]}, {"Records": [{"body": "{}"}]}],
    ids=["empty", "no-records", "not-a-list", "not-objects", "no-ids"],
)
def test_a_batch_with_nothing_to_name_is_an_empty_partial_response(monitor, entry, event):
    response = monitor.invoke(getattr(handlers, entry), copy.deepcopy(event))
    assert response == {"batchItemFailures": []}


def test_a_window_batch_with_one_bad_record_still_runs_the_good_window(monitor, monkeypatch):
    ran: list[str] = []
    monkeypatch.setattr(window_logic, "run_window", lambda window, **kw: ran.append(window.window_id) or {})
    good = window_message()
    event = sqs_records([good, {"not": "a window"}])
    event["Records"].append({"body": json.dumps(window_message())})  # no messageId: set aside, never run
    response = monitor.invoke(handlers.event_window, event)
    assert response == {"batchItemFailures": []}
    assert ran == [good["window_id"]]


def test_a_stream_batch_with_one_bad_record_still_queues_the_good_transition(monitor):
    drain(monitor, monitor.resources.outbox_url)
    bad = finding_record(sequence())
    bad["dynamodb"]["NewImage"] = "not a map"
    good = finding_record(sequence())
    response = monitor.invoke(handlers.stream_notifier, {"Records": [bad, good]})
    assert response == {"batchItemFailures": []}
    queued = [json.loads(m["Body"])["records"] for m in drain(monitor, monitor.resources.outbox_url)]
    assert [good["dynamodb"]["SequenceNumber"]] in queued
    assert not any(bad["dynamodb"]["SequenceNumber"] in ids for ids in queued)
    kept_bodies = drain(monitor, monitor.resources.unprocessed_queue_url)
    [kept] = [m for m in kept_bodies if bad["dynamodb"]["SequenceNumber"] in m["Body"]]
    assert "not a map" in kept["MessageAttributes"]["reason"]["StringValue"]


# --------------------------------------------------------------------------- regressions: the review's three failures


def test_a_lone_surrogate_in_an_unusable_event_is_kept_with_a_visible_replacement(monitor):
    """Was: UnicodeEncodeError from the unprocessed-events path (the event could not be encoded as UTF-8)."""
    drain(monitor, monitor.resources.unprocessed_queue_url)
    event = json.loads((EVENTS / "hyperpod_node_health_event.json").read_text())
    event["detail"]["ClusterArn"] = "arn:aws:sagemaker:us-west-2:111122223333:cluster/\ud800bad"
    event["detail"]["HealthSummary"] = {"HealthStatusReason": "lone \udc80 surrogate"}
    result = monitor.invoke(handlers.event_handler, event)
    assert result["status"] == "rejected" and result["kept"] is True
    [kept] = drain(monitor, monitor.resources.unprocessed_queue_url)
    body = json.loads(kept["Body"])
    assert body["detail"]["ClusterArn"].endswith(f"cluster/{REPLACEMENT}bad")
    assert body["detail"]["HealthSummary"]["HealthStatusReason"] == f"lone {REPLACEMENT} surrogate"
    assert body["id"] == event["id"]


def test_a_lone_surrogate_in_a_usable_event_does_not_stop_its_window(monitor):
    event = json.loads((EVENTS / "hyperpod_node_health_event.json").read_text())
    event["id"] = str(uuid.uuid4())
    event["detail"]["HealthSummary"]["HealthStatusReason"] = "Xid 79 \ud800"
    before = queue_depth(monitor, monitor.resources.window_queue_url)
    result = monitor.invoke(handlers.event_handler, event)
    assert result["status"] == "queued"
    assert (
        result.get("window") == "joined the open window"
        or queue_depth(monitor, monitor.resources.window_queue_url) == before + 1
    )


def test_a_stream_batch_whose_records_all_lack_a_sequence_number_is_set_aside_not_raised(monitor):
    """Was: Powertools' UnexpectedBatchTypeError on the empty batch left after the records without a sequence
    number were set aside; the invocation failed, and its retries landed four copies in the DLQ."""
    drain(monitor, monitor.resources.unprocessed_queue_url)
    records = [copy.deepcopy(r) for r in STREAM_CAPTURE["Records"]]
    for record in records:
        del record["dynamodb"]["SequenceNumber"]
    monitor.output.lines.clear()
    response = monitor.invoke(handlers.stream_notifier, {"Records": records})
    assert response == {"batchItemFailures": []}
    kept = drain(monitor, monitor.resources.unprocessed_queue_url)
    assert len(kept) == 2
    assert all("SequenceNumber" in m["MessageAttributes"]["reason"]["StringValue"] for m in kept)
    new = monitor.output.lines
    assert sum("stream record unreadable" in line for line in new) == 2
    assert any('"StreamRecordsUnreadable"' in line for line in new)


def test_one_malformed_log_event_does_not_hold_back_the_good_detections(monitor):
    """Was: the whole payload rejected for one event's wrong field, and its detections never triaged."""
    drain(monitor, monitor.resources.unprocessed_queue_url)
    document = copy.deepcopy(HMA_DOCUMENT)
    document["logGroup"] = f"/aws/sagemaker/Clusters/fuzz-{next(_ids)}/lw12e0dn1hhd"
    document["logEvents"].insert(0, {"id": "bad-1", "timestamp": "yesterday", "message": None})
    result = monitor.invoke(handlers.log_subscription, subscription(document))
    # THEN the detection of the good event is queued for its node's window
    assert result["status"] == "queued"
    [node] = result["nodes"]
    assert node["node"] == NODE and node["window"]
    # AND the bad event is reported with its reason, and kept with it
    [bad] = result["bad_events"]
    assert bad["index"] == 0 and "logEvents.0.timestamp" in bad["reason"] and "logEvents.0.message" in bad["reason"]
    [kept] = drain(monitor, monitor.resources.unprocessed_queue_url)
    assert json.loads(kept["Body"])["logEvents"] == [document["logEvents"][0]]
    assert kept["MessageAttributes"]["kind"]["StringValue"] == "log event"


def test_a_log_payload_whose_events_are_all_malformed_is_reported_not_raised(monitor):
    document = copy.deepcopy(HMA_DOCUMENT)
    document["logEvents"] = [None, {"id": 1}, "text"]
    result = monitor.invoke(handlers.log_subscription, subscription(document))
    assert result["status"] == "queued" and result["nodes"] == []
    assert [b["index"] for b in result["bad_events"]] == [0, 1, 2]
    drain(monitor, monitor.resources.unprocessed_queue_url)
