"""The monitor's adapters: Secrets Manager (the Slack webhook URL), Slack, SNS, the idempotency store,
the notifier's delivery ledger and the courier's shared Slack lanes (the queue that keeps inputs the monitor
could not process: :func:`functions.monitor.runtime.keep_unprocessed`).

Every boto3 client comes from :class:`hyperpod_debugger.aws.clients.AwsClients`, built lazily (never
at import). The webhook URL is a secret: it is never logged, and errors name only a hash of it.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from functions.monitor.logic import outbox
from functions.monitor.logic.outbox import ChannelError, Lane, LocalLanes, OutboxMessage, Pace, Slot
from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.notify.slack import DeliveryError, post_to_webhook, webhook_id

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer


@lru_cache(maxsize=4)
def idempotency_store(table_name: str, region: str) -> DynamoDBPersistenceLayer:
    # Imported here: only the triage's functions remember what they ran (the others import this module too).
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

    return DynamoDBPersistenceLayer(table_name=table_name, boto3_client=AwsClients(region).client("dynamodb"))


def webhook_url(clients: AwsClients, secret_name: str) -> str:
    """The secret's value: the URL itself, or JSON with a ``url`` / ``webhook_url`` key."""
    try:
        value = clients.client("secretsmanager").get_secret_value(SecretId=secret_name)["SecretString"]
    except (ClientError, BotoCoreError, KeyError) as exc:
        raise ChannelError(f"the Slack webhook secret could not be read ({type(exc).__name__})") from None
    text = value.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            raise ChannelError("the Slack webhook secret is not valid JSON") from None
        text = str(data.get("url") or data.get("webhook_url") or "").strip()
    if not text:
        raise ChannelError("the Slack webhook secret holds no URL")
    return text


#: EventBridge error codes that say the request or entry itself is wrong (sending it again cannot succeed).
REFUSED_EVENTS = frozenset({"ValidationException", "InvalidArgument", "MalformedDetail"})


class AwsChannels:
    """Slack through an incoming webhook (URL in Secrets Manager), email through an SNS topic.

    A channel without configuration is skipped. The webhook URL is read once per instance. One
    attempt per call: the outbox queue retries, with backoff, for as long as its messages live.
    """

    def __init__(
        self,
        clients: AwsClients,
        *,
        secret_name: str | None,
        topic_arn: str | None,
        slack_attempts: int = 1,
        slack_timeout: float = 5.0,
        chat_topic_arn: str | None = None,
    ) -> None:
        self._clients = clients
        self._secret_name = secret_name
        self._topic_arn = topic_arn
        self._chat_topic_arn = chat_topic_arn
        self._attempts = slack_attempts
        self._timeout = slack_timeout
        self._url: str | None = None

    def _webhook(self) -> str:
        if self._url is None:
            self._url = webhook_url(self._clients, self._secret_name or "")
        return self._url

    def slack_hook(self) -> str | None:
        """The webhook's :func:`webhook_id` (safe to store and log), None without a Slack channel. Raises
        :class:`ChannelError` when the secret cannot be read."""
        return webhook_id(self._webhook()) if self._secret_name else None

    def slack(self, payload: dict[str, Any]) -> None:
        if not self._secret_name:
            return
        url = self._webhook()
        try:
            post_to_webhook(url, payload, timeout=self._timeout, attempts=self._attempts)
        except DeliveryError as exc:
            # DeliveryError's text is already free of the URL (notify.slack redacts it).
            raise ChannelError(f"slack: {exc}", permanent=not exc.retryable, retry_after=exc.retry_after) from None

    def email(self, subject: str, body: str) -> None:
        self._publish("sns", self._topic_arn, body, subject=subject)

    def chat(self, notification: str) -> None:
        """Amazon Q Developer reads the message body as its custom-notification JSON; no subject."""
        self._publish("chatbot", self._chat_topic_arn, notification)

    def _publish(self, name: str, topic_arn: str | None, body: str, *, subject: str | None = None) -> None:
        if not topic_arn:
            return
        params = {"TopicArn": topic_arn, "Message": body} | ({"Subject": subject} if subject else {})
        try:
            self._clients.client("sns").publish(**params)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            # a message SNS refuses as such cannot succeed later; throttling, KMS or access can
            permanent = code in {"InvalidParameter", "InvalidParameterValue"}
            raise ChannelError(f"{name}: {code or type(exc).__name__}", permanent=permanent) from None
        except BotoCoreError as exc:
            raise ChannelError(f"{name}: {type(exc).__name__}") from None

    def events(self, entries: Sequence[dict[str, Any]]) -> None:
        """PutEvents, one request (at most ten entries). A request EventBridge refuses as such cannot succeed
        later; anything else (throttling, access, an entry that failed) is retried, the whole request again:
        consumers drop the repeats by ``detail.event_id``."""
        if not entries:
            return
        try:
            response = self._clients.client("events").put_events(Entries=list(entries))
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            raise ChannelError(f"events: {code or type(exc).__name__}", permanent=code in REFUSED_EVENTS) from None
        except BotoCoreError as exc:
            raise ChannelError(f"events: {type(exc).__name__}") from None
        failed = int(response.get("FailedEntryCount") or 0)
        if failed:
            codes = sorted({str(e.get("ErrorCode")) for e in response.get("Entries", []) if e.get("ErrorCode")})
            raise ChannelError(
                f"events: {failed} of {len(entries)} entries failed ({', '.join(codes) or 'no code'})",
                permanent=bool(codes) and set(codes) <= REFUSED_EVENTS,
            )


class DeliveryLedger:
    """What the notifier already queued and the courier already sent, kept in the idempotency table.

    One item per key (``queued#<message id>``, ``sent#<message id>``) with the table's TTL attribute
    two days out. Read once per batch (BatchGetItem), written after each step (BatchWriteItem). Every
    call is bounded: two SDK attempts with short timeouts and, with a ``deadline`` (a monotonic time),
    nothing once it has passed. The ledger only ever saves a duplicate: when it cannot be read or
    written the message is queued or sent again, never dropped.
    """

    TTL = timedelta(days=2)
    _GET_CHUNK = 100
    _PUT_CHUNK = 25
    _ROUNDS = 2

    def __init__(self, clients: AwsClients, table_name: str, *, deadline: float | None = None) -> None:
        self._ddb = clients.client("dynamodb")
        self._table = table_name
        self._deadline = deadline
        self._known: set[str] = set()
        self.errors: list[str] = []

    def _late(self) -> bool:
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self.errors.append("skipped: the invocation's time is nearly up")
            return True
        return False

    def load(self, keys: Sequence[str]) -> None:
        ids = [k for k in dict.fromkeys(keys) if k]
        for start in range(0, len(ids), self._GET_CHUNK):
            pending = [{"id": {"S": i}} for i in ids[start : start + self._GET_CHUNK]]
            for attempt in range(self._ROUNDS):
                if self._late():
                    return
                try:
                    response = self._ddb.batch_get_item(
                        RequestItems={self._table: {"Keys": pending, "ProjectionExpression": "id"}}
                    )
                except (ClientError, BotoCoreError) as exc:
                    self.errors.append(f"read: {type(exc).__name__}")
                    break
                for item in response.get("Responses", {}).get(self._table, []):
                    self._known.add(item["id"]["S"])
                pending = (response.get("UnprocessedKeys") or {}).get(self._table, {}).get("Keys") or []
                if not pending:
                    break
                time.sleep(0.05 * 2**attempt)

    def done(self, key: str) -> bool:
        return key in self._known

    def mark(self, keys: Sequence[str]) -> None:
        expires = int((datetime.now(UTC) + self.TTL).timestamp())
        fresh = [k for k in dict.fromkeys(keys) if k]
        self._known.update(fresh)
        for start in range(0, len(fresh), self._PUT_CHUNK):
            requests = [
                {"PutRequest": {"Item": {"id": {"S": i}, "expiration": {"N": str(expires)}}}}
                for i in fresh[start : start + self._PUT_CHUNK]
            ]
            for attempt in range(self._ROUNDS):
                if self._late():
                    return
                try:
                    response = self._ddb.batch_write_item(RequestItems={self._table: requests})
                except (ClientError, BotoCoreError) as exc:
                    self.errors.append(f"write: {type(exc).__name__}")
                    break
                requests = (response.get("UnprocessedItems") or {}).get(self._table) or []
                if not requests:
                    break
                time.sleep(0.05 * 2**attempt)


class SqsOutbox:
    """The outbox: an SQS FIFO queue, grouped by channel and cluster, deduplicated by message id."""

    def __init__(self, clients: AwsClients, queue_url: str) -> None:
        self._sqs = clients.client("sqs")
        self._url = queue_url

    @staticmethod
    def group_id(message: OutboxMessage) -> str:
        """``<channel>:<cluster>``, within SQS's 128 characters (a hash stands in for a long group)."""
        group = f"{message.channel}:{message.group}"
        if len(group) <= 128:
            return group
        return f"{message.channel}:" + hashlib.sha256(message.group.encode()).hexdigest()

    def put(self, message: OutboxMessage) -> None:
        try:
            self._sqs.send_message(
                QueueUrl=self._url,
                MessageBody=message.to_json(),
                MessageGroupId=self.group_id(message),
                MessageDeduplicationId=message.id,
                MessageAttributes={
                    "channel": {"DataType": "String", "StringValue": message.channel},
                    "kind": {"DataType": "String", "StringValue": message.kind},
                },
            )
        except (ClientError, BotoCoreError) as exc:
            raise ChannelError(f"outbox: {type(exc).__name__}") from None

    def backoff(self, receipt_handle: str, seconds: int) -> bool:
        """Keep a failed message out of sight for ``seconds`` (its group waits with it). False when SQS
        refused (a total visibility past its limit): the queue's own visibility timeout applies then."""
        try:
            self._sqs.change_message_visibility(
                QueueUrl=self._url, ReceiptHandle=receipt_handle, VisibilityTimeout=int(seconds)
            )
        except (ClientError, BotoCoreError):
            return False
        return True


def dead_letter(clients: AwsClients, queue_url: str, body: str, *, group: str, dedup: str, reason: str) -> None:
    """Put a message that cannot be delivered as it is on the outbox's dead-letter queue, with why.
    Raises ``ChannelError`` when the queue refuses (the message then stays in the outbox)."""
    try:
        clients.client("sqs").send_message(
            QueueUrl=queue_url,
            MessageBody=body,
            MessageGroupId=group[:128] or "unknown",
            MessageDeduplicationId=hashlib.sha256(f"dead:{dedup}".encode()).hexdigest()[:64],
            MessageAttributes={"reason": {"DataType": "String", "StringValue": reason[:1000] or "unknown"}},
        )
    except (ClientError, BotoCoreError) as exc:
        raise ChannelError(f"dead-letter queue: {type(exc).__name__}") from None


def _millis_up(seconds: float) -> str:
    """Epoch seconds as the lane stores them: whole milliseconds, rounded up (a slot is never early)."""
    millis = math.ceil(round(seconds * 1000, 3))
    return f"{millis // 1000}.{millis % 1000:03d}"


class SharedLanes:
    """The paced channels' lanes (one per Slack webhook), shared by every courier through the idempotency
    table: one item per lane, ``pace#<lane>``, holding ``due`` and ``blocked_until`` (epoch seconds, see
    :class:`~functions.monitor.logic.outbox.Lane`), a ``version`` and the table's TTL attribute a day out.

    A lane changes only by an UpdateItem conditional on the version this courier last saw. When another
    courier changed it first, the failed condition hands back the item as it is now (ALL_OLD) and the step
    is worked out again from that, so no two couriers take the same slot and no read is ever needed: one
    call per slot while nobody else sends, two when somebody did. Bounded like the ledger (two SDK
    attempts, short timeouts, nothing after ``deadline``). When the table cannot be used the courier paces
    on its own for the rest of the invocation, from what it last saw (:class:`LocalLanes`): Slack may then
    answer 429s, which hold the channel back; no message is dropped for it.
    """

    PREFIX = "pace#"
    TTL_S = 24 * 3600
    #: Conditional writes one step tries before giving up (every failed one means another courier went first).
    TRIES = 5
    _NAMES = {"#id": "id", "#due": "due", "#blocked": "blocked_until", "#version": "version", "#expires": "expiration"}

    def __init__(self, clients: AwsClients, table_name: str, *, deadline: float | None = None) -> None:
        self._ddb = clients.client("dynamodb")
        self._table = table_name
        self._deadline = deadline
        #: lane -> (what this courier last saw, its version); version 0: no item
        self._seen: dict[str, tuple[Lane, int]] = {}
        self._local: LocalLanes | None = None
        self.errors: list[str] = []
        #: conditional writes another courier got to first
        self.conflicts = 0

    def _fallback(self, reason: str) -> LocalLanes:
        if self._local is None:
            self.errors.append(reason)
            self._local = LocalLanes()
            self._local.lanes.update({lane: seen for lane, (seen, _) in self._seen.items()})
        return self._local

    def reserve(self, lane: str, pace: Pace, *, now: float, within_s: float) -> Slot:
        at = now + pace.interval_s
        for _ in range(self.TRIES):
            if self._local is not None:
                return self._local.reserve(lane, pace, now=now, within_s=within_s)
            state, version = self._seen.get(lane, (Lane(), 0))
            at, after = pace.next_slot(state, now)
            if at - now > within_s:
                return Slot(at, reserved=False)
            if self._write(lane, version, after, now):
                return Slot(at, reserved=True)
        # every try lost to another courier: come back once the slot this one saw has passed
        return Slot(max(at, now + pace.interval_s), reserved=False)

    def block(self, lane: str, pace: Pace, *, until: float) -> None:
        for _ in range(self.TRIES):
            if self._local is not None:
                self._local.block(lane, pace, until=until)
                return
            state, version = self._seen.get(lane, (Lane(), 0))
            after = pace.blocked(state, until)
            if after == state or self._write(lane, version, after, until):
                return

    def _write(self, lane: str, version: int, after: Lane, now: float) -> bool:
        """Write ``after`` over ``version``; False when another courier wrote first (``_seen`` then holds
        what it wrote) or when the table cannot be used (the local lanes take over)."""
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self._fallback("skipped: the invocation's time is nearly up")
            return False
        values = {
            ":due": {"N": _millis_up(after.due)},
            ":blocked": {"N": _millis_up(after.blocked_until)},
            ":next": {"N": str(version + 1)},
            ":expires": {"N": str(int(max(now, after.blocked_until) + self.TTL_S))},
        }
        if version:
            values[":seen"] = {"N": str(version)}
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key={"id": {"S": self.PREFIX + lane}},
                UpdateExpression="SET #due = :due, #blocked = :blocked, #version = :next, #expires = :expires",
                ConditionExpression="#version = :seen" if version else "attribute_not_exists(#id)",
                # DynamoDB refuses a name the expressions do not use: ``#id`` only in the first write's condition
                ExpressionAttributeNames={k: v for k, v in self._NAMES.items() if k != "#id" or not version},
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                self._fallback(f"lane: {exc.response.get('Error', {}).get('Code') or type(exc).__name__}")
                return False
            self.conflicts += 1
            self._seen[lane] = self._parse(exc.response.get("Item"))
            return False
        except BotoCoreError as exc:
            self._fallback(f"lane: {type(exc).__name__}")
            return False
        self._seen[lane] = (Lane(float(values[":due"]["N"]), float(values[":blocked"]["N"])), version + 1)
        return True

    @staticmethod
    def _parse(item: dict[str, Any] | None) -> tuple[Lane, int]:
        """A lane item as the table holds it; none (expired, or never written): an idle lane."""
        if not item:
            return Lane(), 0

        def number(name: str) -> float:
            try:
                return float(item[name]["N"])
            except (KeyError, TypeError, ValueError):
                return 0.0

        return Lane(due=number("due"), blocked_until=number("blocked_until")), int(number("version"))


class AwsCourierPorts:
    """The courier's ports on AWS: the channels (one Slack attempt each), the outbox's backoff, its
    dead-letter queue, the invocation's clock, and the Slack webhook's lane."""

    def __init__(
        self,
        aws: AwsClients,
        *,
        secret_name: str | None,
        topic_arn: str | None,
        slack_timeout: float,
        outbox_url: str,
        dlq_url: str,
        remaining_ms: Callable[[], float],
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        chat_topic_arn: str | None = None,
    ) -> None:
        self._aws = aws
        self._dlq_url = dlq_url
        self._remaining_ms = remaining_ms
        self._clock = clock
        self._sleep = sleep
        self._channels = AwsChannels(
            aws,
            secret_name=secret_name,
            topic_arn=topic_arn,
            slack_attempts=1,
            slack_timeout=slack_timeout,
            chat_topic_arn=chat_topic_arn,
        )
        self._outbox = SqsOutbox(aws, outbox_url)

    def send(self, message: OutboxMessage) -> None:
        outbox.send(message, self._channels)

    def backoff(self, receipt_handle: str, seconds: int) -> None:
        self._outbox.backoff(receipt_handle, seconds)

    def dead_letter(self, body: str, *, group: str, dedup: str, reason: str) -> None:
        dead_letter(self._aws, self._dlq_url, body, group=group, dedup=dedup, reason=reason)

    def remaining_s(self) -> float:
        return float(self._remaining_ms()) / 1000

    def now(self) -> float:
        return self._clock()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._sleep(seconds)

    def lane(self, channel: str) -> str | None:
        """Slack's lane is its webhook (by hash: the URL is a secret); other channels are not paced."""
        if channel == "slack":
            hook = self._channels.slack_hook()
            return f"slack#{hook}" if hook else None
        return None
