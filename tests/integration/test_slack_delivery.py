"""Slack delivery against the local sink: success, one attempt by default, retries of 5xx when asked, a
429 raised at once with its Retry-After (the courier holds the whole webhook back), no retry on 4xx, sink
down, the webhook URL never in a log record or an exception; and the sink's own Slack-like rate limit."""

from __future__ import annotations

import logging
import traceback
from datetime import UTC, datetime

import pytest

from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.lifecycle.incidents import desired_incidents, plan_incidents
from hyperpod_debugger.notify import alerts
from hyperpod_debugger.notify.policy import AlertPolicy, compose
from hyperpod_debugger.notify.slack import DeliveryError, post_to_webhook, webhook_id
from hyperpod_sim.slack_sink import WEBHOOK_PATH, RateLimit, SlackSink

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
    arn = "arn:aws:sagemaker:us-west-2:111122223333:cluster/lw12e0dn1hhd"
    finding = Finding(
        tag=Tag.FAIL,
        priority=Priority.P0,
        check="probe.gpu.xid",
        section="G.1",
        message="GPU fell off the bus",
        cluster_arn=arn,
        instance_id="i-0123456789abcdef0",
        evidence=["Xid 79 <gpu0>"] * 5000,
    )
    t = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    opened = plan_incidents({}, desired_incidents(arn, [("fp", finding)]), t, cluster_arn=arn).changes
    [batch] = compose(
        [c.item for c in opened], AlertPolicy(), ("slack",), cluster_arn=arn, cluster_name="demo", region="us-west-2"
    )
    payload = alerts.slack(batch, runbook_base_url="https://example.com/runbook")
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


def test_one_attempt_by_default(sink, sleep):
    sink.fail_next(1, status=500)
    with pytest.raises(DeliveryError) as info:
        post_to_webhook(sink.url, PAYLOAD, sleep=sleep)
    assert info.value.status == 500 and info.value.retryable
    assert sink.requests == 1 and sleep.waits == [] and sink.received == []


def test_a_429_is_raised_at_once_with_its_retry_after_even_when_retries_are_allowed(sink, sleep, caplog):
    # Retry-After concerns every sender on the webhook: the caller holds them all back, nobody sleeps here
    caplog.set_level(logging.DEBUG)
    sink.fail_next(1, status=429, retry_after=7)
    with pytest.raises(DeliveryError) as info:
        post_to_webhook(sink.url, PAYLOAD, attempts=3, sleep=sleep)
    assert info.value.status == 429 and info.value.retryable and info.value.retry_after == 7.0
    assert sink.requests == 1 and sleep.waits == [] and sink.received == []
    assert sink.url not in str(info.value) and info.value.__cause__ is None
    assert_url_not_logged(caplog, sink.url)


def test_a_429_without_retry_after_says_so(sink, sleep):
    sink.fail_next(1, status=429)
    with pytest.raises(DeliveryError) as info:
        post_to_webhook(sink.url, PAYLOAD, attempts=3, sleep=sleep)
    assert info.value.status == 429 and info.value.retry_after is None
    assert sink.requests == 1 and sleep.waits == []


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


def test_a_gateway_error_that_echoes_the_webhook_path_keeps_no_secret(sink, sleep, caplog):
    # GIVEN a proxy in front of Slack whose error page quotes the request line (the path is the secret)
    caplog.set_level(logging.DEBUG)
    sink.fail_next(1, status=502, echo=True)
    with pytest.raises(DeliveryError) as info:
        post_to_webhook(sink.url, PAYLOAD, sleep=sleep)
    # THEN neither the error (a dead-letter reason, a log line) nor any record carries the secret part
    secret = WEBHOOK_PATH.rsplit("/", 1)[-1]
    assert info.value.status == 502 and "upstream failed for POST" in info.value.message
    assert secret not in str(info.value) and WEBHOOK_PATH not in str(info.value)
    assert_url_not_logged(caplog, sink.url)


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


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_sink_paces_each_webhook_like_slack():
    clock = Clock()
    with SlackSink(rate_limit=RateLimit(per_s=1.0, burst=2), clock=clock) as sink:
        post_to_webhook(sink.url, PAYLOAD)
        post_to_webhook(sink.url, PAYLOAD)  # the burst
        with pytest.raises(DeliveryError) as info:
            post_to_webhook(sink.url, PAYLOAD)
        assert info.value.status == 429 and info.value.retry_after == 1.0
        # another webhook of the same workspace has its own pace
        other = sink.url.replace("/B00000000/", "/B11111111/")
        post_to_webhook(other, PAYLOAD)
        clock.t += 0.5  # half a message regained: still too early, and Slack rounds its Retry-After up
        with pytest.raises(DeliveryError) as again:
            post_to_webhook(sink.url, PAYLOAD)
        assert again.value.retry_after == 1.0
        clock.t += 0.5
        post_to_webhook(sink.url, PAYLOAD)
    assert len(sink.received) == 4 and sink.throttled == 2 and sink.requests == 6
    assert [status for _, status in sink.log] == [200, 200, 429, 200, 429, 200]
    assert [t for t, _ in sink.log] == [1000.0, 1000.0, 1000.0, 1000.0, 1000.5, 1001.0]


def test_without_a_rate_limit_the_sink_answers_every_request():
    with SlackSink() as sink:
        for _ in range(10):
            post_to_webhook(sink.url, PAYLOAD)
    assert len(sink.received) == 10 and sink.throttled == 0
