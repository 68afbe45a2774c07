"""Foreign input never crashes the monitor: fuzzed HyperPod events and stream records (hypothesis).

An event either becomes a signal (or is ignored) or is rejected with a reason the handler keeps; a
stream record is either read or set aside with its reason. Nothing else may happen."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from functions.monitor.logic import alerts, signals
from functions.shared.events import parse_hyperpod_event
from hyperpod_debugger.aws.store import from_item
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
    read = alerts.read_records(records, from_item=from_item)
    assert len(read.changes) + len(read.unreadable) + len(read.orphans) <= len(records)
    assert all(isinstance(reason, str) and reason for reason in read.unreadable.values())
