"""Slack delivery against the local sink: success, retries, Retry-After, no retry on 4xx, sink down,
and the webhook URL never in a log record or an exception."""

from __future__ import annotations

import logging
import traceback
from datetime import UTC, datetime

import pytest

from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.notify import Notice, slack_message
from hyperpod_debugger.notify.slack import DeliveryError, post_to_webhook, webhook_id
from hyperpod_sim.slack_sink import WEBHOOK_PATH, SlackSink

PAYLOAD = {"text": "hello", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "hello"}}]}


class FakeSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def sink():
    with SlackSink() as s:
        yield s


@pytest.fixture
def sleep() -> FakeSleep:
    return FakeSleep()


def assert_url_not_logged(caplog: pytest.LogCaptureFixture, url: str) -> None:
    secret = WEBHOOK_PATH.rsplit("/", 1)[-1]
    for record in caplog.records:
        text = record.getMessage()
        assert url not in text and secret not in text and WEBHOOK_PATH not in text
    assert caplog.records, "delivery should log what it did"


def test_a_rendered_message_is_delivered(sink, sleep, caplog):
    caplog.set_level(logging.DEBUG)
    finding = Finding(
        tag=Tag.FAIL,
        priority=Priority.P0,
        check="probe.gpu.xid",
        section="G.1",
        message="GPU fell off the bus",
        instance_id="i-0123456789abcdef0",
        evidence=["Xid 79 <gpu0>"] * 5000,
    )
    t = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    payload = slack_message(
        Notice("NEW", finding, t, t, 1, "demo", "us-west-2"), runbook_base_url="https://example.com/runbook"
    )
    post_to_webhook(sink.url, payload, sleep=sleep)
    assert sink.received == [payload] and sink.requests == 1 and sleep.waits == []
    assert_url_not_logged(caplog, sink.url)
    assert any(webhook_id(sink.url) in r.getMessage() for r in caplog.records)
    # urllib3 logs the request line (path included) at DEBUG: the path is replaced by the hash
    assert any('"POST /<webhook-' in r.getMessage() for r in caplog.records if r.name.startswith("urllib3"))


def test_a_500_is_retried_with_backoff_then_succeeds(sink, sleep, caplog):
    caplog.set_level(logging.DEBUG)
    sink.fail_next(2, status=500)
    post_to_webhook(sink.url, PAYLOAD, attempts=3, backoff=0.5, sleep=sleep)
    assert sink.requests == 3 and sink.received == [PAYLOAD]
    assert sleep.waits == [0.5, 1.0]
    assert_url_not_logged(caplog, sink.url)


def test_a_429_honours_retry_after(sink, sleep):
    sink.fail_next(1, status=429, retry_after=7)
    post_to_webhook(sink.url, PAYLOAD, backoff=1.0, sleep=sleep)
    assert sleep.waits == [7.0] and sink.received == [PAYLOAD]


def test_a_429_without_retry_after_backs_off(sink, sleep):
    sink.fail_next(1, status=429)
    post_to_webhook(sink.url, PAYLOAD, backoff=2.0, sleep=sleep)
    assert sleep.waits == [2.0] and sink.received == [PAYLOAD]


def test_a_400_is_not_retried(sink, sleep, caplog):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(DeliveryError) as info:
        post_to_webhook(
            sink.url, {"blocks": [{"type": "header", "text": {"type": "plain_text", "text": "x" * 151}}]}, sleep=sleep
        )
    assert info.value.status == 400 and "invalid_blocks" in info.value.message and not info.value.retryable
    assert sink.requests == 1 and sleep.waits == [] and sink.received == []
    assert_url_not_logged(caplog, sink.url)


def test_persistent_5xx_raises_after_the_last_attempt(sink, sleep):
    sink.fail_next(5, status=503)
    with pytest.raises(DeliveryError) as info:
        post_to_webhook(sink.url, PAYLOAD, attempts=3, backoff=1.0, sleep=sleep)
    assert info.value.status == 503 and info.value.retryable
    assert sink.requests == 3 and sleep.waits == [1.0, 2.0]


def test_sink_down_raises_delivery_error_without_the_url(sleep, caplog):
    caplog.set_level(logging.DEBUG)
    with SlackSink() as sink:
        url = sink.url
        sink.down()
        with pytest.raises(DeliveryError) as info:
            post_to_webhook(url, PAYLOAD, attempts=2, timeout=2, sleep=sleep)
    err = info.value
    assert err.status is None and err.retryable and "connection error" in err.message
    assert sleep.waits == [1.0]
    rendered = "".join(traceback.format_exception(err))
    assert url not in rendered and WEBHOOK_PATH not in rendered and "127.0.0.1" not in rendered
    assert err.__cause__ is None
    assert_url_not_logged(caplog, url)


def test_plain_http_is_refused_except_on_loopback(sleep):
    url = "http://hooks.slack.com/services/T0/B0/SECRETSECRET"
    with pytest.raises(DeliveryError) as info:
        post_to_webhook(url, PAYLOAD, sleep=sleep)
    assert "https" in info.value.message and "SECRET" not in str(info.value)


def test_the_sink_rejects_what_slack_rejects(sink, sleep):
    with pytest.raises(DeliveryError) as info:
        post_to_webhook(sink.url, {"username": "x"}, sleep=sleep)
    assert info.value.status == 400 and "no_text" in info.value.message
    too_many = {"text": "t", "blocks": [{"type": "divider"}] * 51}
    with pytest.raises(DeliveryError):
        post_to_webhook(sink.url, too_many, sleep=sleep)
    assert sink.rejected[-1] == ["51 blocks (max 50)"]
