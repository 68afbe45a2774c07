"""The event windows' pure parts: a kept record and back, which triage a window asks for, bad messages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from functions.monitor.logic import windows
from functions.monitor.logic.signals import signal_of
from functions.shared.events import parse_hyperpod_event
from tests.unit.test_eventbridge import HEALTH_CAPTURE, published

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def health_signal(instance_id: str, event_id: str):
    event = published(HEALTH_CAPTURE)
    event["id"] = event_id
    event["detail"]["InstanceId"] = instance_id
    signal = signal_of(parse_hyperpod_event(event))
    assert signal is not None
    return signal


def test_a_kept_record_reads_back_as_the_same_signal():
    signal = health_signal("i-0391f86fa0fe0d465", "e-1")
    assert windows.signal_of_record(windows.record_of(signal, T0)) == signal


@pytest.mark.parametrize(
    "record",
    [{}, {"event_id": "x"}, {"event_id": "x", "cluster_arn": "a", "region": "r", "health": {"status": "Unhealthy"}}],
)
def test_a_record_that_is_not_a_signal_is_refused_with_the_reason(record):
    with pytest.raises(ValueError, match="cannot be read"):
        windows.signal_of_record(record)
    assert windows.read_events([record]).unreadable[0]["record"] == record


def test_one_node_is_its_scoped_triage_and_several_are_one_cluster_triage_probing_them():
    a, b = health_signal("i-0aaaaaaaaaaaaaaaa", "e-1"), health_signal("i-0bbbbbbbbbbbbbbbb", "e-2")
    again = health_signal("i-0aaaaaaaaaaaaaaaa", "e-3")
    one = windows.window_request(
        windows.read_events([windows.record_of(s, T0) for s in (a, again)]), T0, probe=True, probe_timeout=60
    )
    assert one.node == a.node and one.nodes == () and len(one.health) == 2
    both = windows.window_request(
        windows.read_events([windows.record_of(s, T0) for s in (a, b, again)]),
        T0,
        probe=True,
        probe_timeout=60,
        max_nodes=7,
    )
    assert both.node is None and both.nodes == (a.node, b.node) and both.probe_options.max_nodes == 7
    assert both.probe and len(both.health) == 3


def test_the_same_events_give_the_same_idempotency_key_in_any_order():
    records = [windows.record_of(health_signal(f"i-0{n:016x}", f"e-{n}"), T0) for n in range(3)]
    forward = windows.read_events(records).idempotency_key("arn")
    assert forward == windows.read_events(records[::-1]).idempotency_key("arn")
    assert forward != windows.read_events(records[:2]).idempotency_key("arn")


def test_a_window_message_names_what_it_lacks():
    window = windows.Window("arn", "us-west-2", "w-1", T0, T0 + timedelta(seconds=100))
    assert windows.Window.from_message(window.message()) == window
    with pytest.raises(ValueError, match="without cluster_arn, window_id"):
        windows.Window.from_message({"region": "us-west-2", "due_at": "2026-12-02T12:00:00.000Z"})
