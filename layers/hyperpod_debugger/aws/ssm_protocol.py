"""Session Manager data-channel codec: the binary ``ClientMessage`` frame and its JSON payloads.

Pure functions and value types, no I/O, for the client's side only: it builds what a client sends
and parses what the agent and the service send. The layout was read from the public sources of
aws/session-manager-plugin (``src/message/clientmessage.go``, ``src/message/messageparser.go``)
and aws/amazon-ssm-agent (``agent/session/contracts/model.go``); it is written here from those
facts, not copied.

Frame layout (all integers big-endian)::

    offset  size  field
         0     4  header length (the value is 116: the offset of the payload-length field)
         4    32  message type, UTF-8, right-padded with spaces
        36     4  schema version
        40     8  created date, epoch milliseconds
        48     8  sequence number (signed)
        56     8  flags (bit 0 SYN, bit 1 FIN)
        64    16  message id: the UUID's low 8 bytes, then its high 8 bytes
        80    32  SHA-256 of the payload
       112     4  payload type
       116     4  payload length
       120     n  payload

A receiver finds the payload at ``header length + 4``.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import time
import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

# --------------------------------------------------------------------------- frame constants

HEADER_LENGTH = 116
PAYLOAD_OFFSET = HEADER_LENGTH + 4
MESSAGE_TYPE_LENGTH = 32

_HEADER = struct.Struct(">I32sIQqQ16s32sII")
assert _HEADER.size == PAYLOAD_OFFSET

INPUT_STREAM_DATA = "input_stream_data"
OUTPUT_STREAM_DATA = "output_stream_data"
ACKNOWLEDGE = "acknowledge"
CHANNEL_CLOSED = "channel_closed"
START_PUBLICATION = "start_publication"
PAUSE_PUBLICATION = "pause_publication"

#: Control messages the sender may emit without a meaningful digest (the plugin skips the check).
_UNCHECKED_TYPES = frozenset({START_PUBLICATION, PAUSE_PUBLICATION})

FLAG_SYN = 1
FLAG_FIN = 2
SCHEMA_VERSION = 1
#: The text frame that opens a data channel carries this schema version.
OPEN_SCHEMA_VERSION = "1.0"


class PayloadType(IntEnum):
    NONE = 0  # acknowledge and other control messages carry no payload type
    OUTPUT = 1
    ERROR = 2
    SIZE = 3
    PARAMETER = 4
    HANDSHAKE_REQUEST = 5
    HANDSHAKE_RESPONSE = 6
    HANDSHAKE_COMPLETE = 7
    ENC_CHALLENGE_REQUEST = 8
    ENC_CHALLENGE_RESPONSE = 9
    FLAG = 10
    STDERR = 11
    EXIT_CODE = 12


class ActionStatus(IntEnum):
    SUCCESS = 1
    FAILED = 2
    UNSUPPORTED = 3


ACTION_SESSION_TYPE = "SessionType"
ACTION_KMS_ENCRYPTION = "KMSEncryption"


class ProtocolError(ValueError):
    """A frame or payload that does not follow the data-channel protocol."""


class DigestMismatch(ProtocolError):
    """The payload does not match its SHA-256 digest: the frame was damaged in transit. Receivers
    drop it without acknowledging it, so the sender transmits it again (as the official plugin does)."""


# --------------------------------------------------------------------------- UUID layout


def uuid_to_wire(value: uuid.UUID) -> bytes:
    """The 16 bytes a frame carries for ``value``: low half first, then high half."""
    raw = value.bytes
    return raw[8:] + raw[:8]


def uuid_from_wire(raw: bytes) -> uuid.UUID:
    if len(raw) != 16:
        raise ProtocolError(f"a message id is 16 bytes, got {len(raw)}")
    return uuid.UUID(bytes=raw[8:] + raw[:8])


# --------------------------------------------------------------------------- the frame


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class ClientMessage:
    message_type: str
    sequence_number: int = 0
    flags: int = 0
    payload_type: int = 0
    payload: bytes = b""
    message_id: uuid.UUID = field(default_factory=uuid.uuid4)
    created_date: int = field(default_factory=now_ms)
    schema_version: int = SCHEMA_VERSION


def encode_message(message: ClientMessage) -> bytes:
    """Serialize ``message``; the digest and the payload length are computed here."""
    kind = message.message_type.encode("utf-8")
    if not kind or len(kind) > MESSAGE_TYPE_LENGTH:
        raise ValueError(f"message type must be 1..{MESSAGE_TYPE_LENGTH} bytes: {message.message_type!r}")
    payload = bytes(message.payload)
    try:
        header = _HEADER.pack(
            HEADER_LENGTH,
            kind.ljust(MESSAGE_TYPE_LENGTH, b" "),
            message.schema_version,
            message.created_date,
            message.sequence_number,
            message.flags,
            uuid_to_wire(message.message_id),
            hashlib.sha256(payload).digest(),
            message.payload_type,
            len(payload),
        )
    except struct.error as exc:
        raise ValueError(f"a header field is out of range: {exc}") from exc
    return header + payload


def decode_message(frame: bytes, *, verify_digest: bool = True) -> ClientMessage:
    """Parse one binary frame. Raises :class:`ProtocolError` for a truncated or inconsistent
    frame, and (unless ``verify_digest`` is false) for a payload whose SHA-256 does not match."""
    frame = bytes(frame)
    if len(frame) < PAYLOAD_OFFSET:
        raise ProtocolError(f"truncated frame: {len(frame)} bytes, a header needs {PAYLOAD_OFFSET}")
    (
        header_length,
        raw_type,
        schema_version,
        created_date,
        sequence_number,
        flags,
        raw_id,
        digest,
        payload_type,
        payload_length,
    ) = _HEADER.unpack_from(frame)
    if header_length != HEADER_LENGTH:
        # The plugin reads the payload at header_length + 4, but every sender writes 116; anything
        # else means the fields above were read from the wrong offsets.
        raise ProtocolError(f"unexpected header length {header_length} (expected {HEADER_LENGTH})")
    try:
        message_type = raw_type.strip(b"\x00").decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"message type is not UTF-8: {raw_type!r}") from exc
    if not message_type:
        raise ProtocolError("empty message type")
    payload = frame[PAYLOAD_OFFSET:]
    if len(payload) < payload_length:
        raise ProtocolError(
            f"truncated frame: {message_type} declares a {payload_length}-byte payload, {len(payload)} present"
        )
    if len(payload) > payload_length:
        raise ProtocolError(
            f"{len(payload) - payload_length} byte(s) after the declared "
            f"{payload_length}-byte payload of {message_type}"
        )
    if verify_digest and payload_length and message_type not in _UNCHECKED_TYPES:
        if hashlib.sha256(payload).digest() != digest:
            raise DigestMismatch(f"payload digest mismatch in {message_type} #{sequence_number}")
    return ClientMessage(
        message_type=message_type,
        sequence_number=sequence_number,
        flags=flags,
        payload_type=payload_type,
        payload=payload,
        message_id=uuid_from_wire(raw_id),
        created_date=created_date,
        schema_version=schema_version,
    )


def data_message(message_type: str, sequence_number: int, payload_type: int, payload: bytes) -> ClientMessage:
    """A sequenced data message; the first of a stream carries SYN."""
    return ClientMessage(
        message_type=message_type,
        sequence_number=sequence_number,
        flags=FLAG_SYN if sequence_number == 0 else 0,
        payload_type=int(payload_type),
        payload=payload,
    )


# --------------------------------------------------------------------------- JSON payloads


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _loads_object(payload: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"{what} payload is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError(f"{what} payload is not a JSON object")
    return obj


def open_data_channel_text(token: str, *, client_id: str, client_version: str, request_id: str | None = None) -> str:
    """The first (text) frame on a new data channel: it hands the session token to the service."""
    return json.dumps(
        {
            "MessageSchemaVersion": OPEN_SCHEMA_VERSION,
            "RequestId": request_id or str(uuid.uuid4()),
            "TokenValue": token,
            "ClientId": client_id,
            "ClientVersion": client_version,
        },
        separators=(",", ":"),
    )


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    message_type: str
    message_id: str
    sequence_number: int
    is_sequential: bool = True


def acknowledge_message(of: ClientMessage) -> ClientMessage:
    """The ``acknowledge`` message for a received data message (sequence 0, SYN|FIN, as senders do)."""
    content = {
        "AcknowledgedMessageType": of.message_type,
        "AcknowledgedMessageId": str(of.message_id),
        "AcknowledgedMessageSequenceNumber": of.sequence_number,
        "IsSequentialMessage": True,
    }
    return ClientMessage(
        message_type=ACKNOWLEDGE, sequence_number=0, flags=FLAG_SYN | FLAG_FIN, payload=_dumps(content)
    )


def parse_acknowledgement(payload: bytes) -> Acknowledgement:
    obj = _loads_object(payload, "acknowledge")
    seq = obj.get("AcknowledgedMessageSequenceNumber")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ProtocolError("acknowledge payload has no integer AcknowledgedMessageSequenceNumber")
    return Acknowledgement(
        message_type=str(obj.get("AcknowledgedMessageType", "")),
        message_id=str(obj.get("AcknowledgedMessageId", "")),
        sequence_number=seq,
        is_sequential=bool(obj.get("IsSequentialMessage", True)),
    )


@dataclass(frozen=True, slots=True)
class RequestedAction:
    action_type: str
    parameters: Any


@dataclass(frozen=True, slots=True)
class HandshakeRequest:
    agent_version: str
    actions: tuple[RequestedAction, ...]

    def action(self, action_type: str) -> RequestedAction | None:
        return next((a for a in self.actions if a.action_type == action_type), None)

    @property
    def session_type(self) -> str | None:
        action = self.action(ACTION_SESSION_TYPE)
        if action is None or not isinstance(action.parameters, dict):
            return None
        value = action.parameters.get("SessionType")
        return value if isinstance(value, str) else None


def parse_handshake_request(payload: bytes) -> HandshakeRequest:
    obj = _loads_object(payload, "handshake request")
    raw_actions = obj.get("RequestedClientActions")
    if raw_actions is None:
        raw_actions = []
    if not isinstance(raw_actions, list):
        raise ProtocolError("handshake request: RequestedClientActions is not a list")
    actions = []
    for raw in raw_actions:
        if not isinstance(raw, dict) or not isinstance(raw.get("ActionType"), str):
            raise ProtocolError(f"handshake request: malformed action {raw!r}")
        actions.append(RequestedAction(raw["ActionType"], raw.get("ActionParameters")))
    return HandshakeRequest(agent_version=str(obj.get("AgentVersion", "")), actions=tuple(actions))


@dataclass(frozen=True, slots=True)
class ProcessedAction:
    action_type: str
    status: ActionStatus
    result: Any = None
    error: str = ""


def handshake_response_payload(client_version: str, actions: list[ProcessedAction], errors: list[str]) -> bytes:
    return _dumps(
        {
            "ClientVersion": client_version,
            "ProcessedClientActions": [
                {
                    "ActionType": a.action_type,
                    "ActionStatus": int(a.status),
                    "ActionResult": a.result,
                    "Error": a.error,
                }
                for a in actions
            ],
            "Errors": list(errors),
        }
    )


@dataclass(frozen=True, slots=True)
class HandshakeComplete:
    time_to_complete_ns: int
    customer_message: str


def parse_handshake_complete(payload: bytes) -> HandshakeComplete:
    obj = _loads_object(payload, "handshake complete")
    ns = obj.get("HandshakeTimeToComplete", 0)
    return HandshakeComplete(
        time_to_complete_ns=ns if isinstance(ns, int) and not isinstance(ns, bool) else 0,
        customer_message=str(obj.get("CustomerMessage") or ""),
    )


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    output: str
    session_id: str = ""
    message_id: str = ""
    destination_id: str = ""


def parse_channel_closed(payload: bytes) -> ChannelClosed:
    """The service's ``channel_closed`` payload. An empty or non-JSON payload still closes the
    channel, so it parses to an empty ``output`` rather than an error."""
    if not payload.strip():
        return ChannelClosed(output="")
    try:
        obj = _loads_object(payload, "channel_closed")
    except ProtocolError:
        return ChannelClosed(output=payload.decode("utf-8", "replace"))
    return ChannelClosed(
        output=str(obj.get("Output") or ""),
        session_id=str(obj.get("SessionId") or ""),
        message_id=str(obj.get("MessageId") or ""),
        destination_id=str(obj.get("DestinationId") or ""),
    )


_EXIT_CODE = re.compile(rb"^\s*EXIT_CODE:\s*(-?\d+)\s*$")


def parse_exit_code(payload: bytes) -> int:
    """``EXIT_CODE: <n>`` (the agent's ExitCode payload) -> n."""
    match = _EXIT_CODE.match(payload)
    if not match:
        raise ProtocolError(f"unexpected ExitCode payload {payload[:64]!r}")
    return int(match.group(1))
