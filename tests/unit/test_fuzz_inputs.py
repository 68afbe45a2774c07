"""Foreign input never crashes the monitor: fuzzed HyperPod events, stream records, batches and log events
(hypothesis).

An event either becomes a signal (or is ignored) or is rejected with a reason the handler keeps; a
stream record is either read or set aside with its reason; a lone surrogate becomes U+FFFD; a batch record a
partial response cannot name is set aside; a log event that cannot be read is reported and never holds back the
payload's good ones. Nothing else may happen (the handlers themselves: tests/integration/test_fuzz_handlers.py)."""

from __future__ import annotations

import base64
import copy
import gzip
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from functions.monitor import hma_logs
from functions.monitor.logic import signals
from functions.monitor.stream_records import read_records
from functions.shared.events import parse_hyperpod_event
from functions.shared.odd_input import REPLACEMENT, batch_records, sqs_message_id, without_surrogates
from hyperpod_debugger.store.findings import from_item
from tests.unit.test_eventbridge import PUBLISHED, published

EVENTS = sorted(p.name for p in PUBLISHED.glob("*.json"))
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(EVENTS), data=st.data(), value=JSONISH)
def test_a_mutated_published_event_is_a_signal_or_a_rejection(name, data, value):
    event = copy.deepcopy(published(name))
    paths = list(_paths(event))
    path = data.draw(st.sampled_from(paths))
    target = event
    for key in path[:-1]:
        target = target[key]
    if data.draw(st.booleans()):
        target[path[-1]] = value
    else:
        del target[path[-1]]
    try:
        signal = signals.signal_of(parse_hyperpod_event(event))
    except (ValidationError, signals.UnusableEvent):
        return
    if signal is not None:
        assert signal.region and signal.cluster
        assert signal.node is None or signal.node.startswith("i-")


@settings(max_examples=300, deadline=None)
@given(records=st.lists(JSONISH | st.fixed_dictionaries({"dynamodb": JSONISH}), max_size=6))
def test_any_stream_records_are_read_or_set_aside_never_raised(records):
    read = read_records(records, from_item=from_item)
    assert len(read.changes) + len(read.unreadable) + len(read.orphans) <= len(records)
    assert all(isinstance(reason, str) and reason for reason in read.unreadable.values())


# --------------------------------------------------------------------------- lone surrogates, batches, log events

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ODD_TEXT = st.text(alphabet=st.characters(codec=None) | SURROGATES, max_size=20)
ODD_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | ODD_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ODD_TEXT, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=ODD_JSON)
def test_without_surrogates_leaves_text_every_encoder_takes(value):
    cleaned = without_surrogates(value)
    json.dumps(cleaned, ensure_ascii=False).encode("utf-8")  # raised UnicodeEncodeError before the cleaning
    assert without_surrogates(cleaned) is cleaned  # nothing left to replace: the same object back
    if _encodes(value):
        assert cleaned is value  # nothing to replace: never copied


def _encodes(value) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def test_a_lone_surrogate_becomes_a_visible_replacement_and_a_real_character_stays():
    assert without_surrogates({"k\ud800": ["a\udc80b", "🙂"]}) == {f"k{REPLACEMENT}": [f"a{REPLACEMENT}b", "🙂"]}


@settings(max_examples=300, deadline=None)
@given(records=st.lists(ODD_JSON | st.fixed_dictionaries({"messageId": ODD_JSON}), max_size=6))
def test_a_batch_is_split_into_records_a_response_can_name_and_records_set_aside(records):
    split = batch_records({"Records": records})
    assert len(split.records) + len(split.set_aside) == len(records)
    ids = [sqs_message_id(r) for r in split.records]
    assert all(isinstance(i, str) and i.strip() for i in ids) and len(set(ids)) == len(ids)
    assert all(isinstance(reason, str) and reason for _, reason in split.set_aside)


@settings(max_examples=200, deadline=None)
@given(events=st.lists(ODD_JSON | st.fixed_dictionaries({"id": ODD_JSON, "timestamp": ODD_JSON}), max_size=5))
def test_any_log_events_are_read_one_by_one_never_holding_back_the_good_detection(events):
    document = json.loads((PUBLISHED.parent / "hma_log_subscription.json").read_text())
    good = document["logEvents"][0]
    document["logEvents"] = [*events, good]
    data = base64.b64encode(gzip.compress(json.dumps(document).encode("utf-8", "surrogatepass"))).decode()
    batch = hma_logs.read_subscription({"awslogs": {"data": data}}, region="us-west-2")
    assert batch is not None
    [signal] = batch.signals  # the good detection is still a signal for its node
    assert signal.node == "i-0391f86fa0fe0d465"
    assert all(bad.reason.startswith(f"logEvents.{bad.index}") for bad in batch.bad_events)
    assert len(batch.bad_events) <= len(events)
