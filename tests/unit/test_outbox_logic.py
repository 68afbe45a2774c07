"""The outbox's pure parts: messages, their ids, and when a failed one is tried again."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.monitor.logic import alerts, outbox
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.lifecycle.findings import State, StoredFinding, TransitionKind

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/lw12e0dn1hhd"


def change(record: str, kind: TransitionKind = TransitionKind.NEW) -> alerts.StreamChange:
    finding = StoredFinding(
        fingerprint="f" * 32,
        cluster_arn=ARN,
        instance_id="i-0123456789abcdef0",
        check="probe.xid",
        section="G.1",
        tag=Tag.FAIL,
        priority=Priority.P0,
        state=State.OPEN,
        first_seen=NOW.isoformat(),
        last_seen=NOW.isoformat(),
        count=1,
        message="Xid 79",
        cluster_name="ml-eks-prod",
    )
    return alerts.StreamChange(record_id=record, kind=kind, at=NOW.isoformat(), finding=finding)


def test_one_message_per_configured_channel_email_first():
    delivery = alerts.Delivery(key="single:1", kind="single", changes=[change("1")])
    message = alerts.Message(slack={"text": "x", "blocks": []}, subject="s", body="b")
    out = outbox.outbox_messages(delivery, message, channels=("slack", "sns"), now=NOW)
    assert [m.channel for m in out] == ["sns", "slack"]
    assert out[0].subject == "s" and out[0].slack is None and out[1].slack == {"text": "x", "blocks": []}
    assert {m.group for m in out} == {ARN}
    assert outbox.outbox_messages(delivery, message, channels=("sns",), now=NOW)[0].channel == "sns"


def test_a_message_survives_its_own_json_and_its_id_depends_on_channel_and_records_only():
    delivery = alerts.Delivery(key="single:1", kind="single", changes=[change("1")])
    message = alerts.Message(slack={"text": "é ✅", "blocks": [{"type": "divider"}]}, subject="s", body="b")
    for item in outbox.outbox_messages(delivery, message, channels=outbox.CHANNELS, now=NOW):
        assert outbox.OutboxMessage.from_json(item.to_json()) == item
    assert outbox.message_id("slack", ["2", "1"]) == outbox.message_id("slack", ["1", "2"])
    assert outbox.message_id("slack", ["1"]) != outbox.message_id("sns", ["1"])
    assert len(outbox.message_id("slack", [str(n) for n in range(500)])) <= 128  # SQS's deduplication id limit


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{broken", "not JSON"),
        ("[]", "not an outbox message"),
        (json.dumps({"v": 2}), "not an outbox message"),
        (json.dumps({"v": 1, "channel": "pager"}), "unknown channel"),
        (
            json.dumps(
                {
                    "v": 1,
                    "channel": "slack",
                    "id": "x",
                    "group": "g",
                    "key": "k",
                    "kind": "single",
                    "created_at": "t",
                    "records": ["1"],
                }
            ),
            "without its payload",
        ),
        (
            json.dumps(
                {
                    "v": 1,
                    "channel": "sns",
                    "id": "x",
                    "group": "g",
                    "key": "k",
                    "kind": "single",
                    "created_at": "t",
                    "records": "1",
                    "subject": "s",
                    "body": "b",
                }
            ),
            "records",
        ),
    ],
)
def test_a_body_that_is_not_a_message_says_why(body, reason):
    with pytest.raises(ValueError, match=reason):
        outbox.OutboxMessage.from_json(body)


@given(st.text(max_size=300))
def test_any_text_is_a_message_or_a_value_error(text):
    try:
        outbox.OutboxMessage.from_json(text)
    except ValueError:
        pass


@pytest.mark.parametrize(
    ("receives", "retry_after", "seconds"),
    [
        (1, None, 60),
        (2, None, 120),
        (4, None, 480),
        (5, None, 900),
        (60, None, 900),
        (3, 30.0, 30),
        (1, 0.2, 1),
        (1, 1.5, 2),  # never back before the channel said: rounded up
        (1, 7.0001, 8),
        (1, 10**9, 12 * 3600),
    ],
)
def test_backoff_doubles_to_its_cap_and_honours_retry_after(receives, retry_after, seconds):
    assert outbox.retry_delay(receives, retry_after) == seconds


def test_a_day_long_outage_fits_in_the_receive_limit():
    # the stack's 200 receives at this backoff outlast 24 hours
    assert sum(outbox.retry_delay(n, None) for n in range(1, 201)) > 24 * 3600
