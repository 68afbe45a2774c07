"""The notifier reads stream records with Powertools' model: what DynamoDB really sends is read, a
record that is not a stream record is set aside with where and why, never raised.

The envelope comes from a captured stream event (tests/events/stream/SOURCES.md); the finding items in the
derived cases are what our store writes (``typed(to_item(...))``), so only the envelope is borrowed.
"""

from __future__ import annotations

import copy
import json
import pathlib
from datetime import UTC, datetime

import pytest

from functions.monitor.stream_records import read_records
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.lifecycle.findings import State, StoredFinding, TransitionKind
from hyperpod_debugger.store.findings import from_item, to_item, typed

CAPTURE = json.loads(
    (pathlib.Path(__file__).parents[1] / "events" / "stream" / "dynamodb-stream-capture.json").read_text()
)
ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh"
AT = datetime(2026, 12, 2, 3, 0, tzinfo=UTC).isoformat()


def stored(state: State = State.OPEN) -> StoredFinding:
    return StoredFinding(
        fingerprint="a" * 32,
        cluster_arn=ARN,
        instance_id="i-0123456789abcdef0",
        check="probe.xid",
        section="G.1",
        tag=Tag.FAIL,
        priority=Priority.P0,
        state=state,
        first_seen=AT,
        last_seen=AT,
        count=1,
        message="Xid 79 on GPU 3",
        evidence=("NVRM: Xid (PCI:0000:53:00): 79, pid=1234, GPU has fallen off the bus.",),
    )


def transition_record(kind: TransitionKind, *, old: bool) -> dict:
    """The captured MODIFY record's envelope with a finding's images as the store writes them."""
    record = copy.deepcopy(CAPTURE["Records"][0])
    new = to_item(stored()) | {"last_transition": str(kind), "last_transition_at": AT}
    record["dynamodb"]["NewImage"] = typed(new)
    record["dynamodb"]["Keys"] = typed({"pk": new["pk"], "sk": new["sk"]})
    if old:
        record["dynamodb"]["OldImage"] = typed(new | {"last_transition_at": "2026-12-01T00:00:00+00:00"})
    else:
        record["dynamodb"].pop("OldImage")
        record["eventName"] = "INSERT"
    return record


def test_a_captured_stream_event_is_read_whole_and_holds_no_transition():
    read = read_records(CAPTURE["Records"], from_item=from_item)
    assert list(read.records) == ["1100000000000136137170", "1200000000000136158523"]
    assert read.unreadable == {} and read.orphans == []
    assert read.changes == []  # its items are not findings


@pytest.mark.parametrize("old", [False, True], ids=["insert", "modify"])
def test_a_finding_transition_in_a_real_envelope_becomes_one_change(old):
    read = read_records([transition_record(TransitionKind.NEW, old=old)], from_item=from_item)
    assert read.unreadable == {}
    [change] = read.changes
    assert change.kind is TransitionKind.NEW and change.at == AT
    assert change.finding.fingerprint == "a" * 32 and change.finding.count == 1
    assert change.finding.evidence == stored().evidence


def test_an_unchanged_transition_time_is_a_heartbeat_not_a_change():
    record = transition_record(TransitionKind.NEW, old=True)
    record["dynamodb"]["OldImage"] = copy.deepcopy(record["dynamodb"]["NewImage"])
    assert read_records([record], from_item=from_item).changes == []


@pytest.mark.parametrize(
    ("damage", "where"),
    [
        (lambda r: r["dynamodb"].update(NewImage="not a map"), "dynamodb.NewImage: Value error, is a str, not a map"),
        (lambda r: r["dynamodb"].update(OldImage=[1]), "dynamodb.OldImage: Value error, is a list, not a map"),
        (lambda r: r["dynamodb"]["NewImage"].update(count={"Q": "1"}), "dynamodb.NewImage"),
        (lambda r: r.update(eventSource="aws:kinesis"), "eventSource"),
        (lambda r: r["dynamodb"].pop("StreamViewType"), "dynamodb.StreamViewType: Field required"),
        (lambda r: r.update(eventName="UPSERT"), "eventName"),
    ],
    ids=["image-not-a-map", "old-image-a-list", "unknown-attribute-type", "not-dynamodb", "no-view-type", "bad-name"],
)
def test_a_damaged_record_is_set_aside_with_where_and_why_and_the_others_still_read(damage, where):
    bad = transition_record(TransitionKind.NEW, old=True)
    bad["dynamodb"]["SequenceNumber"] = "9000001"
    damage(bad)
    good = transition_record(TransitionKind.NEW, old=False)
    read = read_records([bad, good], from_item=from_item)
    assert list(read.unreadable) == ["9000001"]
    assert read.unreadable["9000001"].startswith(where)
    assert "Xid 79" not in read.unreadable["9000001"]  # the reason never copies the item
    assert [c.record_id for c in read.changes] == [good["dynamodb"]["SequenceNumber"]]
