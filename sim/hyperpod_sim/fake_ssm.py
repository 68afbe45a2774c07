"""A local Session Manager double: the SSM API for StartSession, TerminateSession, DescribeSessions and
the Session documents StartSession may name (CreateDocument, GetDocument) (AWS JSON 1.1 over HTTP on
127.0.0.1), plus a websocket data channel that plays the SSM agent's part
of the real wire protocol. Nodes reply through callbacks, and faults can be switched on for each node.

Used by the demo and by tests of the product's Session Manager client. The framing is implemented
here on purpose, independently of the product's client (``aws/ssm_protocol.py``). Because the two
implementations are separate, each test that runs the client against this fake checks both.

Usage::

    with FakeSsm() as fake:
        fake.add_node("sagemaker-cluster:abcdef123456_workers-i-0123456789abcdef0",
                      marker_aware(lambda command: NodeReply(b"GPU 0: NVIDIA H100\\n", b"", 0)))
        os.environ["AWS_ENDPOINT_URL_SSM"] = fake.endpoint_url
        ...

``marker_aware`` makes the node print the client's exit-status marker the way a shell would
(:func:`find_exit_marker`), and hands the responder the bare command.

Protocol summary (checked against the public plugin and agent sources):

* first websocket frame, text: ``{"MessageSchemaVersion": "1.0", "RequestId", "TokenValue", "ClientId",
  "ClientVersion"}``;
* then binary messages: a 116-byte header, then a 4-byte payload length, then the payload
  (see :func:`encode_frame`). Every integer is big-endian. The MessageId's two 8-byte halves are
  stored low half first;
* each side numbers its own ``input_stream_data``/``output_stream_data`` stream from 0. Each data
  message is acknowledged with an ``acknowledge`` message, and unacknowledged data is sent again;
* the agent's handshake: HandshakeRequest (payload 5), the client's HandshakeResponse (6), then
  HandshakeComplete (7);
* with ``separateOutputStream=true``: stdout as payload 1, stderr as 11, then ``EXIT_CODE: <n>`` as 12.
  Without it, stdout and stderr are merged into payload 1 and no exit code is sent;
* the end: a ``channel_closed`` message whose JSON ``Output`` carries an error text, or "" when none.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
import secrets
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from hyperpod_sim.background import serve_in_background, stop_serving

__all__ = [
    "DOCUMENT",
    "HEADER_LENGTH",
    "FakeSsm",
    "Faults",
    "Frame",
    "FrameError",
    "NodeReply",
    "SessionRecord",
    "StartCall",
    "decode_frame",
    "ExitMarker",
    "encode_frame",
    "find_exit_marker",
    "marker_aware",
    "with_exit_marker",
]

DOCUMENT = "AWS-StartNonInteractiveCommand"
SESSION_TYPE = "NonInteractiveCommands"

# ---------------------------------------------------------------------------------------------------
# Wire format
# ---------------------------------------------------------------------------------------------------

#: The value of the header-length field: the offset of PayloadLength. The payload starts 4 bytes later.
HEADER_LENGTH = 116
# HL | MessageType | SchemaVersion | CreatedDate | SequenceNumber | Flags | MessageId low | MessageId high
# | PayloadDigest | PayloadType | PayloadLength
_HEADER = struct.Struct(">I32sIQqQ8s8s32sII")
assert _HEADER.size == HEADER_LENGTH + 4

FLAG_SYN = 1
FLAG_FIN = 2
#: Control messages (acknowledge, channel_closed, publication) carry sequence 0 with SYN and FIN set.
CONTROL_FLAGS = FLAG_SYN | FLAG_FIN

INPUT = "input_stream_data"
OUTPUT = "output_stream_data"
ACK = "acknowledge"
CHANNEL_CLOSED = "channel_closed"
START_PUBLICATION = "start_publication"
PAUSE_PUBLICATION = "pause_publication"

P_OUTPUT = 1
P_ERROR = 2
P_HANDSHAKE_REQUEST = 5
P_HANDSHAKE_RESPONSE = 6
P_HANDSHAKE_COMPLETE = 7
P_FLAG = 10
P_STDERR = 11
P_EXIT_CODE = 12

ACTION_SUCCESS = 1
ACTION_FAILED = 2
ACTION_UNSUPPORTED = 3


class FrameError(ValueError):
    """Bytes that are not a well-formed ClientMessage."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded ClientMessage."""

    message_type: str
    schema_version: int
    created_date: int
    sequence_number: int
    flags: int
    message_id: uuid.UUID
    payload_digest: bytes
    payload_type: int
    payload: bytes
    header_length: int = HEADER_LENGTH

    @property
    def digest_ok(self) -> bool:
        return hashlib.sha256(self.payload).digest() == self.payload_digest

    def json(self) -> Any:
        return json.loads(self.payload)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def encode_frame(
    message_type: str,
    payload: bytes = b"",
    *,
    sequence_number: int = 0,
    flags: int = 0,
    payload_type: int = 0,
    message_id: uuid.UUID | None = None,
    created_ms: int | None = None,
    schema_version: int = 1,
) -> bytes:
    """Serialize one ClientMessage. The MessageType is space-padded to 32 bytes, and the digest is
    the SHA-256 of the payload."""
    name = message_type.encode("utf-8")
    if not name or len(name) > 32:
        raise ValueError(f"message type must be 1..32 bytes: {message_type!r}")
    mid = (message_id or uuid.uuid4()).bytes
    header = _HEADER.pack(
        HEADER_LENGTH,
        name.ljust(32, b" "),
        schema_version,
        created_ms if created_ms is not None else _now_ms(),
        sequence_number,
        flags,
        mid[8:],
        mid[:8],
        hashlib.sha256(payload).digest(),
        payload_type,
        len(payload),
    )
    return header + payload


def decode_frame(data: bytes, *, verify_digest: bool = True) -> Frame:
    """Parse one ClientMessage. Stricter than the Go parser: the header length must be 116, the
    declared payload length must match, and (by default) so must the digest of a non-empty payload."""
    if len(data) < _HEADER.size:
        raise FrameError(f"{len(data)} bytes is shorter than a ClientMessage header")
    hl, name, version, created, seq, flags, low, high, digest, ptype, plen = _HEADER.unpack_from(data)
    if hl != HEADER_LENGTH:
        raise FrameError(f"header length {hl}, expected {HEADER_LENGTH}")
    message_type = name.strip(b"\x00").decode("utf-8", errors="replace").strip()
    if not message_type:
        raise FrameError("empty message type")
    payload = bytes(data[hl + 4 :])
    if plen != len(payload):
        raise FrameError(f"payload length field {plen}, but {len(payload)} payload bytes")
    if created == 0 and message_type not in (START_PUBLICATION, PAUSE_PUBLICATION):
        raise FrameError("CreatedDate is missing")
    frame = Frame(message_type, version, created, seq, flags, uuid.UUID(bytes=high + low), digest, ptype, payload, hl)
    if verify_digest and payload and not frame.digest_ok:
        raise FrameError("payload digest does not match the payload")
    return frame


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _verbatim(text: str) -> Callable[[re.Match[str]], str]:
    """A ``re.sub`` replacement that inserts ``text`` as it is, its backslashes not read as escapes."""
    return lambda _match: text


def _chunks(data: bytes, size: int) -> list[bytes]:
    """Split ``data`` into chunks of at most ``size`` bytes, never inside a UTF-8 character (as the
    agent does). A single character longer than ``size`` goes out whole."""
    out: list[bytes] = []
    start, total = 0, len(data)
    while start < total:
        end = min(start + size, total)
        if end < total:
            cut, back = end, 0
            while cut > start and back < 3 and data[cut] & 0xC0 == 0x80:
                cut, back = cut - 1, back + 1
            if cut == start:
                cut = end
                while cut < total and data[cut] & 0xC0 == 0x80:
                    cut += 1
            end = cut
        out.append(data[start:end])
        start = end
    return out


# ---------------------------------------------------------------------------------------------------
# Nodes, replies, the exit-code marker
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeReply:
    """What the node's command printed and returned. ``delay`` is seconds before the first output.
    ``stdout_tail`` is stdout printed after the command finished (the exit marker), so it comes
    last even when stdout and stderr are merged."""

    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int = 0
    delay: float = 0.0
    stdout_tail: bytes = b""

    def __post_init__(self) -> None:
        for name in ("stdout", "stderr", "stdout_tail"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, value.encode("utf-8"))


Responder = Callable[[str], NodeReply]

# A printf of a format holding %s, with the status as its argument: `printf '<fmt>' $?`,
# `printf "<fmt>" "$rc"`.
_PRINTF_STATUS = r"""printf\s+(?:'(?P<sq>[^']*%s[^']*)'|"(?P<dq>[^"]*%s[^"]*)")\s+(?:"\$(?:\?|rc)"|\$(?:\?|rc))"""
# Form 1: `<body>; printf '<fmt>' $?` at the very end of the line.
_SUFFIX = re.compile(r";\s*" + _PRINTF_STATUS + r"\s*$")
# Form 2: `sh -c '<program>' <$0> <body>`, the program running "$@" and printing the status.
_WRAPPED = re.compile(r"\s*(?:/bin/|/usr/bin/)?(?:ba)?sh\s+-c\s+'(?P<program>[^']*)'\s+\S+\s+(?P<body>\S.*)", re.S)
_PRINTF_IN_PROGRAM = re.compile(_PRINTF_STATUS)
_EXITS_WITH_STATUS = re.compile(r"""exit\s+(?:"\$rc"|\$rc)\s*;?\s*$""")
_PRINTF_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


@dataclass(frozen=True, slots=True)
class ExitMarker:
    """How a command line reports its body's exit status in stdout (see :func:`find_exit_marker`)."""

    #: the command the node's program really runs
    body: str
    #: the printf format, one ``%s`` for the status
    format: str
    #: whether the whole line exits with the body's status (the ``sh -c`` wrapper) or with printf's 0
    keeps_status: bool


def find_exit_marker(command: str) -> ExitMarker | None:
    """Recognise the client's exit-status marker in a command line, or return None.

    Two shapes are recognised, both ending in a ``printf`` of a format holding ``%s`` with the status
    as its argument. The client's format is ``\\n__HPD_RC_<nonce>=%s\\n``:

    * wrapper: ``sh -c '…"$@"…; printf "<format>" "$rc"; exit "$rc"' sh <body>``. The program runs
      the words of ``<body>`` and prints their status; it exits with that status when it ends in
      ``exit "$rc"``. This is what the product's client sends;
    * suffix: ``<body>; printf '<format>' $?`` at the very end of the line. It exits with printf's 0.

    Only the end of the line (suffix) or the quoted program (wrapper) is examined, so quotes inside
    ``<body>`` (``bash -c '…'``) do no harm.
    """
    wrapped = _WRAPPED.fullmatch(command)
    if wrapped is not None and '"$@"' in wrapped["program"]:
        printf = _PRINTF_IN_PROGRAM.search(wrapped["program"])
        if printf is not None:
            keeps = _EXITS_WITH_STATUS.search(wrapped["program"]) is not None
            return ExitMarker(wrapped["body"].strip(), printf["sq"] or printf["dq"], keeps)
    suffix = _SUFFIX.search(command)
    if suffix is not None:
        return ExitMarker(command[: suffix.start()].rstrip(), suffix["sq"] or suffix["dq"], False)
    return None


def _render_printf(fmt: str, argument: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(fmt):
        char = fmt[index]
        nxt = fmt[index + 1] if index + 1 < len(fmt) else ""
        if char == "\\" and nxt in _PRINTF_ESCAPES:
            out.append(_PRINTF_ESCAPES[nxt])
            index += 2
        elif char == "%" and nxt == "s":
            out.append(argument)
            argument = ""  # one argument: a second %s prints nothing
            index += 2
        elif char == "%" and nxt == "%":
            out.append("%")
            index += 2
        else:
            out.append(char)
            index += 1
    return "".join(out)


def with_exit_marker(command: str, reply: NodeReply) -> NodeReply:
    """What the node prints for ``command`` when its body produced ``reply``.

    When the command carries an exit marker (:func:`find_exit_marker`), the rendered marker line with
    the body's exit code goes into ``stdout_tail``: it is printed after everything the body printed,
    stderr included. The line's exit status stays the body's for the wrapper, and becomes printf's 0
    for the suffix form, as on a real node. Without a marker, ``reply`` is returned unchanged.
    """
    marker = find_exit_marker(command)
    if marker is None:
        return reply
    line = _render_printf(marker.format, str(reply.exit_code)).encode("utf-8")
    status = reply.exit_code if marker.keeps_status else 0
    return NodeReply(reply.stdout, reply.stderr, status, reply.delay, reply.stdout_tail + line)


def marker_aware(responder: Responder) -> Responder:
    """Wrap a responder so that the node behaves like a shell running the client's exit marker: the
    inner responder gets only the body of the command, and the marker line is added to what it
    returns (:func:`with_exit_marker`)."""

    def respond(command: str) -> NodeReply:
        marker = find_exit_marker(command)
        return with_exit_marker(command, responder(marker.body if marker is not None else command))

    return respond


# ---------------------------------------------------------------------------------------------------
# Faults and records
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Faults:
    """Injected faults. Per node through ``add_node(..., faults=)``, service-wide through
    ``FakeSsm(faults=)``. A node field left at its default inherits the service-wide value."""

    #: bytes per output frame (the agent's own is 1024); None keeps the service's ``chunk_size``
    chunk_size: int | None = None
    #: output frames leave in reversed windows of ``reorder_window`` frames
    out_of_order: bool = False
    reorder_window: int = 4
    #: every agent data frame is sent twice in a row
    duplicate_frames: bool = False
    #: the client's first HandshakeResponse frame is treated as lost: no acknowledge, not processed.
    #: The session goes on only after the client sends it again
    drop_first_ack: bool = False
    #: the agent accepts the token, then sends nothing and never closes (until TerminateSession)
    hang: bool = False
    #: the first N StartSession calls (for this node; service-wide: any target) get ThrottlingException
    throttle_first_n: int = 0
    #: StartSession answers TargetNotConnected
    not_connected: bool = False
    #: the HandshakeRequest also asks for KMSEncryption, which the fake cannot complete: a client must
    #: refuse it (ActionStatus 2 or 3), and the session then ends with channel_closed and an error Output
    kms_required: bool = False
    #: an old agent: separateOutputStream is ignored, output merged into payload 1, no exit code
    no_separate_streams: bool = False
    #: StartSession answers AccessDeniedException
    access_denied: bool = False
    #: the first output frame goes out once with an altered payload under the original digest; the
    #: retransmitted copy is intact
    bad_digest: bool = False

    def __post_init__(self) -> None:
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        if self.reorder_window < 2:
            raise ValueError("reorder_window must be at least 2")
        if self.throttle_first_n < 0:
            raise ValueError("throttle_first_n must not be negative")

    def over(self, base: Faults) -> Faults:
        """These faults, with every field left at its default taken from ``base``."""
        values = {}
        for spec in fields(self):
            mine = getattr(self, spec.name)
            values[spec.name] = getattr(base, spec.name) if mine == spec.default else mine
        return Faults(**values)


NO_FAULTS = Faults()


@dataclass(frozen=True, slots=True)
class StartCall:
    """One StartSession call. ``error`` is the error code, or None when the call succeeded."""

    time: float  # time.monotonic()
    target: str
    error: str | None
    session_id: str | None = None


@dataclass(eq=False)
class SessionRecord:
    """Everything the fake saw and did in one session. The agent side updates it on its own thread.
    Read it through ``FakeSsm.session()``, which returns a snapshot."""

    session_id: str
    target: str
    command: str
    parameters: dict[str, Any]
    document_name: str
    separate_requested: bool
    faults: Faults
    token: str
    stream_url: str
    region: str
    started_at: float  # time.monotonic()
    start_date: float  # epoch seconds
    status: str = "Connecting"  # Connecting → Connected → Terminated | Failed
    end_date: float | None = None
    #: headers of the accepted websocket upgrade
    upgrade_headers: dict[str, str] = field(default_factory=dict)
    #: why upgrades were refused (require_signature, unknown or finished session)
    rejected_upgrades: list[str] = field(default_factory=list)
    open_message: dict[str, Any] | None = None
    text_frames: list[str] = field(default_factory=list)
    #: every well-formed binary frame from the client, in arrival order (duplicates included)
    frames: list[Frame] = field(default_factory=list)
    #: (raw bytes, reason) for every client frame that failed to parse or verify
    invalid_frames: list[tuple[bytes, str]] = field(default_factory=list)
    #: the client's data messages in sequence order, each once: (payload type, payload)
    delivered: list[tuple[int, bytes]] = field(default_factory=list)
    handshake_response: dict[str, Any] | None = None
    #: sequence numbers the client acknowledged, in arrival order
    acks_received: list[int] = field(default_factory=list)
    #: acknowledges whose AcknowledgedMessageId did not match the message with that sequence number
    ack_id_mismatches: list[tuple[int, str]] = field(default_factory=list)
    #: (sequence number, payload type) of each agent data message, in creation order
    sent: list[tuple[int, int]] = field(default_factory=list)
    retransmissions: int = 0
    duplicates_received: int = 0
    #: client sequence numbers dropped by the drop_first_ack fault
    dropped: list[int] = field(default_factory=list)
    #: whether output went out separated (None until the command ran)
    separate_used: bool | None = None
    #: completed | token_rejected | no_token | handshake_timeout | handshake_failed | command_error
    #: | hung | terminated | client_closed
    outcome: str | None = None
    close_output: str | None = None
    unacked_at_close: int = 0
    #: an unexpected exception inside the fake's agent (a bug in the fake, or a broken responder)
    error: str | None = None

    def snapshot(self) -> SessionRecord:
        copy = SessionRecord(**{spec.name: getattr(self, spec.name) for spec in fields(self)})
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, list | dict):
                setattr(copy, spec.name, type(value)(value))
        return copy


@dataclass
class _Node:
    responder: Responder
    faults: Faults | None
    calls: int = 0


class _ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class _Bucket:
    """StartSession token bucket; the caller holds the fake's lock."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.last = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


_SCOPE = re.compile(r"Credential=(?P<scope>[^,\s]+)")


def _credential_scope(value: str | None) -> list[str] | None:
    """``[access key, date, region, service, "aws4_request"]`` from a SigV4 Authorization header."""
    if not value:
        return None
    match = _SCOPE.search(value)
    if match is None:
        return None
    parts = match.group("scope").split("/")
    return parts if len(parts) == 5 else None


# ---------------------------------------------------------------------------------------------------
# The service
# ---------------------------------------------------------------------------------------------------


RequestHook = Callable[[str, str, dict[str, str], bytes, int, Any], None]


class FakeSsm:
    """SSM Session Manager on loopback. Use it as a context manager (or ``start()``/``stop()``).

    Parameters
    ----------
    region:
        The region in the StreamUrl scope check. A session takes its region from the StartSession
        call's SigV4 scope when there is one.
    faults:
        Service-wide faults (see :class:`Faults`).
    start_session_rate, start_session_burst:
        StartSession token bucket: ``rate`` calls per second, bursts of ``burst`` (default: the rate,
        at least 1). Over the limit → ThrottlingException. None or 0 turns the limit off.
    chunk_size:
        Output bytes per frame (the agent's StreamDataPayloadSize is 1024).
    require_signature:
        Refuse (HTTP 403) a websocket upgrade without a SigV4 Authorization header (or presigned
        query) scoped to ``ssmmessages`` and the session's region. Only the shape is checked, not the
        signature.
    retransmit_after:
        The agent's first retransmission timeout, and its floor: an unacknowledged data frame goes out
        again after this many seconds. Like the agent, the timeout then follows the measured
        round-trip time (smoothed RTT + 4 × variation), capped at max(1 s, retransmit_after).
    handshake_timeout, token_timeout:
        How long the agent waits for the HandshakeResponse / the first text frame.
    ack_wait:
        How long the agent waits for all its output to be acknowledged before channel_closed.
    close_grace:
        After channel_closed, how long the service waits for the client to close the websocket
        before closing it itself (the plugin closes on channel_closed). A refused token is closed
        at once.
    send_start_publication:
        Send a ``start_publication`` control message once the token is accepted (the service tells
        the client to start sending; the plugin ignores it, and so must any client).
    principal, account_id:
        The SessionId prefix (``<principal>-<17 hex>``, default ``botocore-session-<epoch>``) and the
        account in error messages and DescribeSessions' Owner.
    agent_version, kms_key_id:
        What the HandshakeRequest announces.

    Records: ``started``, ``start_calls``, ``terminated``, ``open_sessions()``, ``session(id)``,
    ``frames_received(id)``, ``internal_errors``; ``wait_idle()`` and ``wait_session_done(id)``
    wait for the agent side.
    """

    def __init__(
        self,
        *,
        region: str = "us-west-2",
        faults: Faults | None = None,
        start_session_rate: float | None = 3.0,
        start_session_burst: float | None = None,
        chunk_size: int = 1024,
        require_signature: bool = False,
        retransmit_after: float = 0.5,
        handshake_timeout: float = 15.0,
        token_timeout: float = 10.0,
        ack_wait: float = 10.0,
        close_grace: float = 2.0,
        send_start_publication: bool = True,
        principal: str | None = None,
        account_id: str = "123456789012",
        agent_version: str = "3.3.2299.0",
        kms_key_id: str = "arn:aws:kms:us-west-2:123456789012:key/0b5c5a2e-2f6b-4a8e-9d43-5f1c2e7a9d10",
    ) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self.region = region
        self.chunk_size = chunk_size
        self.require_signature = require_signature
        self.retransmit_after = retransmit_after
        self.handshake_timeout = handshake_timeout
        self.token_timeout = token_timeout
        self.ack_wait = ack_wait
        self.close_grace = close_grace
        self.send_start_publication = send_start_publication
        self.principal = principal or f"botocore-session-{int(time.time())}"
        self.account_id = account_id
        self.agent_version = agent_version
        self.kms_key_id = kms_key_id

        self._lock = threading.RLock()
        self._faults = faults or NO_FAULTS
        self._nodes: dict[str, _Node] = {}
        self._sessions: dict[str, SessionRecord] = {}
        self._started: list[tuple[float, str]] = []
        self._start_calls: list[StartCall] = []
        self._terminated: set[str] = set()
        self._internal_errors: list[str] = []
        #: Session documents created through CreateDocument: name -> (content, tags)
        self._documents: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}
        self._total_calls = 0
        rate = start_session_rate or 0.0
        self._bucket = _Bucket(rate, max(1.0, start_session_burst or rate)) if rate > 0 else None

        self._live: dict[str, _AgentChannel] = {}
        self._connected: set[str] = set()
        self._idle = threading.Condition(self._lock)

        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ws_server: Server | None = None
        self._ws_thread: threading.Thread | None = None
        self._ws_port = 0
        self.endpoint_url = ""
        #: called after each API request and each data-channel upgrade with (method, path, headers, body,
        #: status, JSON answer or None): a recorder of what reached the service (the rehearsal's IAM check)
        self.on_request: RequestHook | None = None

    # -- lifecycle ------------------------------------------------------------------------------------

    def __enter__(self) -> FakeSsm:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> FakeSsm:
        if self._http is not None:
            raise RuntimeError("FakeSsm is already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        self._ws_thread = threading.Thread(
            target=self._ws_main, args=(ready, failure), name="fake-ssm-agent", daemon=True
        )
        self._ws_thread.start()
        ready.wait()
        if failure:
            self._ws_thread.join()
            self._ws_thread = None
            raise RuntimeError("the fake SSM data channel did not start") from failure[0]

        handler = type("_BoundApiHandler", (_ApiHandler,), {"fake": self})
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = False  # stop() joins every request thread
        self._http_thread = serve_in_background(self._http, "fake-ssm-api")
        self.endpoint_url = f"http://127.0.0.1:{self._http.server_address[1]}"
        return self

    def stop(self) -> None:
        """Close every websocket, stop both servers and join their threads. Idempotent."""
        if self._http is not None:
            stop_serving(self._http, self._http_thread, timeout=10)
            self._http = None
            self._http_thread = None
        loop, thread = self._loop, self._ws_thread
        if loop is not None and thread is not None:
            if not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    asyncio.run_coroutine_threadsafe(self._ws_close(), loop).result(timeout=15)
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=15)
        self._loop = None
        self._ws_thread = None

    @property
    def ws_port(self) -> int:
        return self._ws_port

    def _ws_main(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            self._ws_server = loop.run_until_complete(self._ws_open())
            self._ws_port = self._ws_server.sockets[0].getsockname()[1]
            self._loop = loop
        except BaseException as exc:  # noqa: BLE001 - handed to start(), which raises it
            failure.append(exc)
            loop.close()
            ready.set()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    async def _ws_open(self) -> Server:
        return await serve(
            self._ws_handler,
            "127.0.0.1",
            0,
            process_request=self._ws_process_request,
            compression=None,
            max_size=2**22,
            server_header=None,
        )

    async def _ws_close(self) -> None:
        if self._ws_server is not None:
            self._ws_server.close(close_connections=True)
            await self._ws_server.wait_closed()

    # -- nodes and faults -----------------------------------------------------------------------------

    def add_node(self, target: str, responder: Responder | NodeReply, *, faults: Faults | None = None) -> None:
        """Register a session target. ``responder(command) -> NodeReply`` runs on a worker thread for
        each session; a plain ``NodeReply`` answers every command the same way."""
        if isinstance(responder, NodeReply):
            reply = responder

            def respond(_command: str) -> NodeReply:
                return reply

            responder = respond
        with self._lock:
            self._nodes[target] = _Node(responder, faults)

    def set_faults(self, faults: Faults | None, target: str | None = None) -> None:
        """Replace the service-wide faults, or one node's (``target``). Applies to new sessions."""
        with self._lock:
            if target is None:
                self._faults = faults or NO_FAULTS
            else:
                self._nodes[target].faults = faults
                self._nodes[target].calls = 0

    # -- records --------------------------------------------------------------------------------------

    @property
    def started(self) -> list[tuple[float, str]]:
        """(time.monotonic(), target) of each successful StartSession."""
        with self._lock:
            return list(self._started)

    @property
    def start_calls(self) -> list[StartCall]:
        """Every StartSession call, including refused ones."""
        with self._lock:
            return list(self._start_calls)

    @property
    def terminated(self) -> set[str]:
        """Session ids that TerminateSession was called for."""
        with self._lock:
            return set(self._terminated)

    @property
    def internal_errors(self) -> list[str]:
        """Unexpected exceptions inside the fake (API handler or agent). Tests should expect none."""
        with self._lock:
            return list(self._internal_errors)

    def session_ids(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    def session(self, session_id: str) -> SessionRecord:
        """A snapshot of one session's record."""
        with self._lock:
            return self._sessions[session_id].snapshot()

    def frames_received(self, session_id: str) -> list[Frame]:
        """Well-formed binary frames the agent received in the session, in arrival order."""
        with self._lock:
            return list(self._sessions[session_id].frames)

    def open_sessions(self) -> int:
        """Websocket data channels open right now."""
        with self._lock:
            return len(self._live)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until no data channel is open; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._live:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True

    def wait_session_done(self, session_id: str, timeout: float = 5.0) -> SessionRecord:
        """Wait until the session's data channel has opened and closed; returns its record."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while True:
                rec = self._sessions[session_id]
                if rec.outcome is not None and session_id not in self._live:
                    return rec.snapshot()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"session {session_id} did not finish within {timeout} s")
                self._idle.wait(min(left, 0.05))

    def _record(self, fn: Callable[[], None]) -> None:
        with self._lock:
            fn()

    # -- the API --------------------------------------------------------------------------------------

    def _dispatch(self, path: str, headers: Any, body: bytes) -> tuple[int, dict[str, Any]]:
        target = headers.get("X-Amz-Target") or ""
        service, _, operation = target.partition(".")
        try:
            if urlsplit(path).path not in ("", "/") or service != "AmazonSSM":
                raise _ApiError("UnknownOperationException", f"unknown operation {target!r}")
            try:
                request = json.loads(body or b"{}")
            except ValueError as exc:
                raise _ApiError("SerializationException", f"request body is not JSON: {exc}") from exc
            if not isinstance(request, dict):
                raise _ApiError("SerializationException", "request body is not a JSON object")
            scope = _credential_scope(headers.get("Authorization"))
            region = scope[2] if scope else self.region
            if operation == "StartSession":
                return 200, self._start_session(request, region)
            if operation == "TerminateSession":
                return 200, self._terminate_session(request)
            if operation == "DescribeSessions":
                return 200, self._describe_sessions(request)
            if operation == "CreateDocument":
                return 200, self._create_document(request)
            if operation == "GetDocument":
                return 200, self._get_document(request)
            raise _ApiError("UnknownOperationException", f"the fake SSM does not implement {operation}")
        except _ApiError as exc:
            return exc.status, {"__type": exc.code, "message": exc.message}
        except Exception as exc:  # noqa: BLE001 - the HTTP boundary: report, never kill the server thread
            with self._lock:
                self._internal_errors.append(f"{operation}: {exc!r}")
            return 500, {"__type": "InternalServerError", "message": f"fake SSM failure: {exc!r}"}

    def _start_session(self, request: dict[str, Any], region: str) -> dict[str, Any]:
        target = request.get("Target")
        now = time.monotonic()
        with self._lock:
            try:
                rec = self._admit(request, target, region, now)
            except _ApiError as exc:
                self._start_calls.append(StartCall(now, str(target), exc.code))
                raise
            self._sessions[rec.session_id] = rec
            self._started.append((now, rec.target))
            self._start_calls.append(StartCall(now, rec.target, None, rec.session_id))
        return {"SessionId": rec.session_id, "TokenValue": rec.token, "StreamUrl": rec.stream_url}

    def _admit(self, request: dict[str, Any], target: Any, region: str, now: float) -> SessionRecord:
        """Checks in the order the service appears to apply them; the caller holds the lock."""
        self._total_calls += 1
        if self._total_calls <= self._faults.throttle_first_n:
            raise _ApiError("ThrottlingException", "Rate exceeded")
        node = self._nodes.get(target) if isinstance(target, str) else None
        if node is not None and node.faults is not None and node.faults.throttle_first_n:
            node.calls += 1
            if node.calls <= node.faults.throttle_first_n:
                raise _ApiError("ThrottlingException", "Rate exceeded")
        if self._bucket is not None and not self._bucket.take():
            raise _ApiError("ThrottlingException", "Rate exceeded")
        if not isinstance(target, str) or not target:
            raise _ApiError("ValidationException", "1 validation error detected: Value null at 'target'")
        faults = node.faults.over(self._faults) if node is not None and node.faults is not None else self._faults
        document = request.get("DocumentName") or "SSM-SessionManagerRunShell"
        if faults.access_denied:
            raise _ApiError(
                "AccessDeniedException",
                f"User: arn:aws:sts::{self.account_id}:assumed-role/hpd-probe/{self.principal} is not authorized "
                f"to perform: ssm:StartSession on resource: arn:aws:ssm:{region}:{self.account_id}:document/"
                f"{document} because no identity-based policy allows the ssm:StartSession action",
            )
        if document == DOCUMENT:
            command, separate = self._parameters(request.get("Parameters"))
        elif document in self._documents:
            command, separate = self._from_document(document, request.get("Parameters"))
        else:
            raise _ApiError("InvalidDocument", f"Document {document} does not exist in your account")
        if node is None or faults.not_connected:
            raise _ApiError("TargetNotConnected", f"{target} is not connected.")

        session_id = f"{self.principal}-{secrets.token_hex(9)[:17]}"
        token = "AAEAA" + base64.b64encode(secrets.token_bytes(240)).decode("ascii")
        cell = base64.b64encode(secrets.token_bytes(48)).decode("ascii")
        stream_url = (
            f"ws://127.0.0.1:{self._ws_port}/v1/data-channel/{session_id}"
            f"?role=publish_subscribe&cell-number={quote(cell, safe='')}"
        )
        return SessionRecord(
            session_id=session_id,
            target=target,
            command=command,
            parameters=dict(request.get("Parameters") or {}),
            document_name=document,
            separate_requested=separate,
            faults=faults,
            token=token,
            stream_url=stream_url,
            region=region,
            started_at=now,
            start_date=time.time(),
        )

    @staticmethod
    def _parameters(parameters: Any) -> tuple[str, bool]:
        if not isinstance(parameters, dict):
            raise _ApiError("InvalidParameters", "Parameters are required: command")
        unknown = set(parameters) - {
            "command",
            "separateOutputStream",
            "stdoutSeparatorPrefix",
            "stderrSeparatorPrefix",
        }
        if unknown:
            raise _ApiError("InvalidParameters", f"Parameters {sorted(unknown)} are not defined in {DOCUMENT}")
        command = parameters.get("command")
        if not isinstance(command, list) or len(command) != 1 or not isinstance(command[0], str) or not command[0]:
            raise _ApiError("InvalidParameters", "Parameter command must be a list of exactly one non-empty string")
        separate = parameters.get("separateOutputStream", ["false"])
        if separate not in (["true"], ["false"]):
            raise _ApiError("InvalidParameters", 'Parameter separateOutputStream must be ["true"] or ["false"]')
        return command[0], separate == ["true"]

    # -- Session documents ---------------------------------------------------------------------------

    _DOCUMENT_NAME = re.compile(r"^[a-zA-Z0-9_.-]{3,128}$")
    _SESSION_TYPES = frozenset({"Standard_Stream", "InteractiveCommands", "NonInteractiveCommands", "Port"})

    def _create_document(self, request: dict[str, Any]) -> dict[str, Any]:
        name, raw = request.get("Name"), request.get("Content")
        if not isinstance(name, str) or not self._DOCUMENT_NAME.match(name):
            raise _ApiError("ValidationException", "Name must match [a-zA-Z0-9_.-]{3,128}")
        if name.lower().startswith(("aws", "amazon", "amzn")):
            raise _ApiError("InvalidDocumentContent", f"the document name {name} uses a reserved prefix")
        if request.get("DocumentType") != "Session":
            raise _ApiError("InvalidDocumentType", "the fake SSM keeps Session documents only")
        if request.get("DocumentFormat", "JSON") != "JSON" or not isinstance(raw, str):
            raise _ApiError("InvalidDocumentContent", "the fake SSM reads JSON document content only")
        try:
            content = json.loads(raw)
        except ValueError as exc:
            raise _ApiError("InvalidDocumentContent", f"the content is not JSON: {exc}") from None
        if not isinstance(content, dict) or content.get("schemaVersion") != "1.0":
            raise _ApiError("InvalidDocumentSchemaVersion", "Session documents use schemaVersion 1.0")
        if content.get("sessionType") not in self._SESSION_TYPES:
            raise _ApiError("InvalidDocumentContent", f"unknown sessionType {content.get('sessionType')!r}")
        tags: dict[str, str] = {t["Key"]: t["Value"] for t in request.get("Tags") or [] if isinstance(t, dict)}
        with self._lock:
            if name in self._documents:
                raise _ApiError("DocumentAlreadyExists", f"Document with name {name} already exists.")
            self._documents[name] = (content, tags)
        return {
            "DocumentDescription": {
                "Name": name,
                "DocumentType": "Session",
                "DocumentFormat": "JSON",
                "Status": "Active",
                "DocumentVersion": "1",
                "Owner": self.account_id,
                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
            }
        }

    def _get_document(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request.get("Name")
        with self._lock:
            found = self._documents.get(name) if isinstance(name, str) else None
        if found is None:
            raise _ApiError("InvalidDocument", f"Document {name} does not exist in your account")
        return {
            "Name": name,
            "DocumentType": "Session",
            "DocumentFormat": "JSON",
            "DocumentVersion": "1",
            "Status": "Active",
            "Content": json.dumps(found[0]),
        }

    def document_tags(self, name: str) -> dict[str, str]:
        with self._lock:
            return dict(self._documents[name][1])

    def _from_document(self, name: str, parameters: Any) -> tuple[str, bool]:
        """The command a custom NonInteractiveCommands document runs, its parameters filled in, and
        whether it asks for separate streams. Parameters it does not declare are refused."""
        content, _ = self._documents[name]
        if content.get("sessionType") != "NonInteractiveCommands":
            raise _ApiError("InvalidDocument", f"the fake SSM runs NonInteractiveCommands documents only, not {name}")
        declared = content.get("parameters") or {}
        given = parameters if isinstance(parameters, dict) else {}
        unknown = set(given) - set(declared)
        if unknown:
            raise _ApiError("InvalidParameters", f"Parameters {sorted(unknown)} are not defined in {name}")
        values: dict[str, str] = {}
        for key, spec in declared.items():
            value = given.get(key)
            if value is None:
                if "default" not in spec:
                    raise _ApiError("InvalidParameters", f"Parameter {key} is required by {name}")
                values[key] = str(spec["default"])
            elif isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
                values[key] = value[0]
            else:
                raise _ApiError("InvalidParameters", f"Parameter {key} must be a list of one string")
            allowed = spec.get("allowedValues")
            if allowed is not None and values[key] not in allowed:
                raise _ApiError("InvalidParameters", f"Parameter {key} must be one of {allowed}")
        linux = (content.get("properties") or {}).get("linux") or {}
        command = linux.get("commands")
        if not isinstance(command, str) or not command:
            raise _ApiError("InvalidDocument", f"{name} has no properties.linux.commands")
        for key, value in values.items():
            command = re.sub(r"\{\{\s*" + re.escape(key) + r"\s*\}\}", _verbatim(value), command)
        separate = linux.get("separateOutputStream", False)
        for key, value in values.items():
            if separate == "{{" + key + "}}" or separate == "{{ " + key + " }}":
                separate = value
        return command, separate is True or str(separate).lower() == "true"

    def _terminate_session(self, request: dict[str, Any]) -> dict[str, Any]:
        session_id = request.get("SessionId")
        if not isinstance(session_id, str) or not session_id:
            raise _ApiError("ValidationException", "1 validation error detected: Value null at 'sessionId'")
        with self._lock:
            self._terminated.add(session_id)
            rec = self._sessions.get(session_id)
            if rec is not None and rec.status not in ("Terminated", "Failed"):
                rec.status = "Terminated"
                rec.end_date = time.time()
            channel = self._live.get(session_id)
            loop = self._loop
        if channel is not None and loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(channel.terminate.set)
        return {"SessionId": session_id}

    def _describe_sessions(self, request: dict[str, Any]) -> dict[str, Any]:
        state = request.get("State")
        if state not in ("Active", "History"):
            raise _ApiError("ValidationException", "State must be Active or History")
        filters = {f.get("key"): f.get("value") for f in request.get("Filters") or [] if isinstance(f, dict)}
        active = ("Connecting", "Connected")
        out = []
        with self._lock:
            for rec in self._sessions.values():
                if (rec.status in active) != (state == "Active"):
                    continue
                if any(
                    filters.get(k) not in (None, v)
                    for k, v in (("Target", rec.target), ("SessionId", rec.session_id), ("Status", rec.status))
                ):
                    continue
                item: dict[str, Any] = {
                    "SessionId": rec.session_id,
                    "Target": rec.target,
                    "Status": rec.status,
                    "StartDate": rec.start_date,
                    "DocumentName": rec.document_name,
                    "Owner": f"arn:aws:sts::{self.account_id}:assumed-role/hpd-probe/{self.principal}",
                }
                if rec.end_date is not None:
                    item["EndDate"] = rec.end_date
                out.append(item)
        return {"Sessions": out}

    # -- the agent side -------------------------------------------------------------------------------

    def _lookup(self, path: str) -> tuple[str | None, SessionRecord | None]:
        parts = urlsplit(path)
        match = re.fullmatch(r"/v1/data-channel/([^/]+)", parts.path)
        if match is None:
            return None, None
        with self._lock:
            return match.group(1), self._sessions.get(match.group(1))

    def _signature_problem(self, request: Request, rec: SessionRecord) -> str | None:
        query = parse_qs(urlsplit(request.path).query)
        auth = request.headers.get("Authorization")
        if auth:
            if not auth.startswith("AWS4-HMAC-SHA256 "):
                return "the Authorization header is not AWS SigV4"
            if "SignedHeaders=" not in auth or "Signature=" not in auth:
                return "the Authorization header lacks SignedHeaders or Signature"
            if not request.headers.get("X-Amz-Date"):
                return "the signed upgrade lacks X-Amz-Date"
            scope = _credential_scope(auth)
        elif "X-Amz-Signature" in query and "X-Amz-Credential" in query:
            scope = query["X-Amz-Credential"][0].split("/")
            scope = scope if len(scope) == 5 else None
        else:
            return "the websocket upgrade is not SigV4-signed (no Authorization header, no presigned query)"
        if scope is None:
            return "the SigV4 credential scope is malformed"
        if scope[3] != "ssmmessages":
            return f"the upgrade is signed for service {scope[3]!r}, not 'ssmmessages'"
        if scope[2] != rec.region:
            return f"the upgrade is signed for region {scope[2]!r}, the session is in {rec.region!r}"
        return None

    def _ws_process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        refused = self._ws_admit(connection, request)
        hook = self.on_request
        if hook is not None:
            headers = dict(request.headers.raw_items())
            hook("GET", request.path, headers, b"", refused.status_code if refused else 101, None)
        return refused

    def _ws_admit(self, connection: ServerConnection, request: Request) -> Response | None:
        session_id, rec = self._lookup(request.path)
        if session_id is None:
            return connection.respond(HTTPStatus.NOT_FOUND, "Not Found\n")
        if rec is None:
            return connection.respond(HTTPStatus.FORBIDDEN, "unknown session\n")
        with self._lock:
            if session_id in self._connected or rec.status in ("Terminated", "Failed"):
                reason = "the session's data channel was already opened or the session has ended"
                rec.rejected_upgrades.append(reason)
                return connection.respond(HTTPStatus.FORBIDDEN, reason + "\n")
        if self.require_signature:
            problem = self._signature_problem(request, rec)
            if problem is not None:
                self._record(lambda: rec.rejected_upgrades.append(problem))
                return connection.respond(HTTPStatus.FORBIDDEN, problem + "\n")
        with self._lock:
            if session_id in self._connected:
                return connection.respond(HTTPStatus.FORBIDDEN, "data channel already opened\n")
            self._connected.add(session_id)
            rec.upgrade_headers = dict(request.headers.raw_items())
        return None

    async def _ws_handler(self, ws: ServerConnection) -> None:
        session_id, rec = self._lookup(ws.request.path if ws.request is not None else "")
        if session_id is None or rec is None:  # process_request refused these already
            return
        channel = _AgentChannel(self, ws, rec)
        with self._lock:
            self._live[session_id] = channel
        try:
            await channel.run()
        finally:
            with self._idle:
                self._live.pop(session_id, None)
                if rec.outcome is None:
                    rec.outcome = "client_closed"
                if rec.status in ("Connecting", "Connected"):
                    ended = rec.outcome in ("completed", "terminated", "client_closed", "hung")
                    rec.status = "Terminated" if ended else "Failed"
                    rec.end_date = time.time()
                self._idle.notify_all()

    def _responder(self, target: str) -> Responder | None:
        with self._lock:
            node = self._nodes.get(target)
            return node.responder if node is not None else None


class _Outgoing:
    __slots__ = ("frame", "last_sent", "message_id", "resent")

    def __init__(self, frame: bytes, message_id: uuid.UUID) -> None:
        self.frame = frame
        self.message_id = message_id
        self.last_sent = float("inf")  # not yet on the wire
        self.resent = False


class _AgentChannel:
    """The agent's half of one data channel; lives on the fake's event loop."""

    def __init__(self, fake: FakeSsm, ws: ServerConnection, rec: SessionRecord) -> None:
        self.fake = fake
        self.ws = ws
        self.rec = rec
        self.faults = rec.faults
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[str | None] = loop.create_future()
        self.terminate = asyncio.Event()
        self.inbox: asyncio.Queue[Frame] = asyncio.Queue()
        self.expected = 0
        self.pending: dict[int, Frame] = {}
        self.out_seq = 0
        self.unacked: dict[int, _Outgoing] = {}
        self.all_acked = asyncio.Event()
        self.all_acked.set()
        self.dropped_once = False
        self.closing = False
        self.rto = fake.retransmit_after
        self.srtt: float | None = None
        self.rttvar = 0.0

    # -- structure ---------------------------------------------------------------------------------

    async def run(self) -> None:
        reader = asyncio.create_task(self._read())
        flow = asyncio.create_task(self._flow())
        stop = asyncio.create_task(self.terminate.wait())
        resender = asyncio.create_task(self._resend())
        tasks = (reader, flow, stop, resender)
        try:
            await asyncio.wait({reader, flow, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not flow.done():
                flow.cancel()
                await asyncio.gather(flow, return_exceptions=True)
                if stop.done() and not self.closing:
                    self._set(outcome="terminated")
                    with contextlib.suppress(ConnectionClosed):
                        await self._close_channel("", outcome="terminated")
            elif flow.exception() is not None and not isinstance(flow.exception(), ConnectionClosed):
                exc = flow.exception()
                self._set(error=repr(exc))
                with self.fake._lock:
                    self.fake._internal_errors.append(f"{self.rec.session_id}: {exc!r}")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(ConnectionClosed):
                await self.ws.close()

    def _set(self, **values: Any) -> None:
        with self.fake._lock:
            for name, value in values.items():
                if name == "outcome" and self.rec.outcome is not None:
                    continue
                setattr(self.rec, name, value)

    # -- receiving ---------------------------------------------------------------------------------

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in self.ws:
                if isinstance(message, str):
                    self.fake._record(partial(self.rec.text_frames.append, message))
                    if not self.opened.done():
                        self.opened.set_result(message)
                    continue
                if not self.opened.done():
                    self.opened.set_result(None)  # binary before the token: refused in _flow
                    continue
                try:
                    frame = decode_frame(message)
                except FrameError as exc:
                    self.fake._record(partial(self.rec.invalid_frames.append, (bytes(message), str(exc))))
                    continue
                self.fake._record(partial(self.rec.frames.append, frame))
                if frame.message_type == ACK:
                    self._on_ack(frame)
                elif frame.message_type == INPUT:
                    await self._on_input(frame)

    def _on_ack(self, frame: Frame) -> None:
        try:
            content = frame.json()
            seq = int(content["AcknowledgedMessageSequenceNumber"])
        except (ValueError, KeyError, TypeError) as exc:
            reason = f"bad acknowledge: {exc}"
            self.fake._record(lambda: self.rec.invalid_frames.append((frame.payload, reason)))
            return
        out = self.unacked.pop(seq, None)
        if out is not None and not out.resent:  # Karn: no RTT sample from a retransmitted frame
            self._measure(time.monotonic() - out.last_sent)
        mismatch = out is not None and str(content.get("AcknowledgedMessageId")) != str(out.message_id)

        def note() -> None:
            self.rec.acks_received.append(seq)
            if mismatch:
                self.rec.ack_id_mismatches.append((seq, str(content.get("AcknowledgedMessageId"))))

        self.fake._record(note)
        if not self.unacked:
            self.all_acked.set()

    def _measure(self, sample: float) -> None:
        """The agent's retransmission timeout: smoothed RTT (1/8) + 4 × RTT variation (1/4)."""
        if self.srtt is None:
            self.srtt, self.rttvar = sample, sample / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
            self.srtt = 0.875 * self.srtt + 0.125 * sample
        floor = self.fake.retransmit_after
        self.rto = min(max(floor, self.srtt + max(0.01, 4 * self.rttvar)), max(1.0, floor))

    async def _on_input(self, frame: Frame) -> None:
        seq = frame.sequence_number
        if self.faults.drop_first_ack and not self.dropped_once and frame.payload_type == P_HANDSHAKE_RESPONSE:
            self.dropped_once = True
            self.fake._record(lambda: self.rec.dropped.append(seq))
            return
        await self._send_ack(frame)
        if seq == self.expected:
            self._deliver(frame)
            while self.expected in self.pending:
                self._deliver(self.pending.pop(self.expected))
        elif seq > self.expected:
            self.pending.setdefault(seq, frame)
        else:

            def note() -> None:
                self.rec.duplicates_received += 1

            self.fake._record(note)

    def _deliver(self, frame: Frame) -> None:
        self.expected += 1
        self.fake._record(lambda: self.rec.delivered.append((frame.payload_type, frame.payload)))
        self.inbox.put_nowait(frame)

    async def _send_ack(self, frame: Frame) -> None:
        content = {
            "AcknowledgedMessageType": frame.message_type,
            "AcknowledgedMessageId": str(frame.message_id),
            "AcknowledgedMessageSequenceNumber": frame.sequence_number,
            "IsSequentialMessage": True,
        }
        await self.ws.send(encode_frame(ACK, _json_bytes(content), flags=CONTROL_FLAGS))

    # -- sending -----------------------------------------------------------------------------------

    def _make_data(self, payload_type: int, payload: bytes) -> int:
        seq = self.out_seq
        self.out_seq += 1
        message_id = uuid.uuid4()
        frame = encode_frame(
            OUTPUT,
            payload,
            sequence_number=seq,
            flags=FLAG_SYN if seq == 0 else 0,
            payload_type=payload_type,
            message_id=message_id,
        )
        self.unacked[seq] = _Outgoing(frame, message_id)
        self.all_acked.clear()
        self.fake._record(lambda: self.rec.sent.append((seq, payload_type)))
        return seq

    async def _transmit(self, seq: int, *, corrupt: bool = False) -> None:
        out = self.unacked.get(seq)
        if out is None:
            return
        wire = out.frame
        if corrupt and len(wire) > _HEADER.size:
            body = bytearray(wire)
            body[_HEADER.size] ^= 0xFF  # the payload changes, the digest stays the original's
            wire = bytes(body)
        out.last_sent = time.monotonic()
        await self.ws.send(wire)
        if self.faults.duplicate_frames:
            await self.ws.send(wire)

    async def _send_data(self, payload_type: int, payload: bytes) -> None:
        await self._transmit(self._make_data(payload_type, payload))

    async def _resend(self) -> None:
        """Like the agent: each tick, the oldest unacknowledged frame goes out again once it is older
        than the retransmission timeout. One frame per tick keeps a slow client from being flooded."""
        interval = max(0.01, min(0.1, self.fake.retransmit_after / 2))
        while True:
            await asyncio.sleep(interval)
            oldest = next(iter(self.unacked.values()), None)
            if oldest is None or time.monotonic() - oldest.last_sent < self.rto:
                continue
            oldest.last_sent = time.monotonic()
            oldest.resent = True

            def note() -> None:
                self.rec.retransmissions += 1

            self.fake._record(note)
            await self.ws.send(oldest.frame)

    async def _close_channel(
        self, output: str, *, outcome: str, code: int = 1000, reason: str = "", at_once: bool = False
    ) -> None:
        self.closing = True
        self._set(outcome=outcome, close_output=output, unacked_at_close=len(self.unacked))
        content = {
            "MessageId": str(uuid.uuid4()),
            "CreatedDate": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            "DestinationId": self.rec.target,
            "SessionId": self.rec.session_id,
            "MessageType": CHANNEL_CLOSED,
            "SchemaVersion": 1,
            "Output": output,
        }
        await self.ws.send(encode_frame(CHANNEL_CLOSED, _json_bytes(content), flags=CONTROL_FLAGS))
        if not at_once:
            # The client may still be acknowledging frames queued before channel_closed; closing under
            # it would stall its sends until websockets' close timeout.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ws.wait_closed(), self.fake.close_grace)
        await self.ws.close(code, reason)

    # -- the session -------------------------------------------------------------------------------

    async def _flow(self) -> None:
        rec = self.rec
        try:
            first = await asyncio.wait_for(self.opened, self.fake.token_timeout)
        except TimeoutError:
            await self._close_channel(
                "no token received on the data channel", outcome="no_token", code=1008, at_once=True
            )
            return
        opened = self._parse_open(first)
        self._set(open_message=opened)
        if opened is None or opened.get("TokenValue") != rec.token:
            await self._close_channel(
                "Invalid token: the data channel token does not match the session",
                outcome="token_rejected",
                code=1008,
                reason="invalid token",
                at_once=True,
            )
            return
        with self.fake._lock:
            if rec.status == "Connecting":
                rec.status = "Connected"
        if self.faults.hang:
            self._set(outcome="hung")
            await asyncio.Event().wait()  # until the client leaves, TerminateSession, or stop()

        if self.fake.send_start_publication:
            await self.ws.send(encode_frame(START_PUBLICATION, b"", flags=CONTROL_FLAGS))
        started = time.monotonic_ns()
        actions: list[dict[str, Any]] = [
            {"ActionType": "SessionType", "ActionParameters": {"SessionType": SESSION_TYPE, "Properties": None}}
        ]
        if self.faults.kms_required:
            actions.append({"ActionType": "KMSEncryption", "ActionParameters": {"KMSKeyId": self.fake.kms_key_id}})
        request = {"AgentVersion": self.fake.agent_version, "RequestedClientActions": actions}
        await self._send_data(P_HANDSHAKE_REQUEST, _json_bytes(request))

        try:
            response_frame = await asyncio.wait_for(self._next_input(P_HANDSHAKE_RESPONSE), self.fake.handshake_timeout)
        except TimeoutError:
            await self._close_channel(
                "Encountered error while initiating handshake. Handshake timed out. "
                "Please ensure that you have the latest version of the session manager plugin.",
                outcome="handshake_timeout",
            )
            return
        problems = self._check_handshake(response_frame)
        if problems:
            await self._close_channel(
                "Encountered error while initiating handshake. " + "; ".join(problems), outcome="handshake_failed"
            )
            return
        complete = {"HandshakeTimeToComplete": time.monotonic_ns() - started, "CustomerMessage": ""}
        await self._send_data(P_HANDSHAKE_COMPLETE, _json_bytes(complete))

        responder = self.fake._responder(rec.target)
        try:
            if responder is None:
                raise LookupError(f"node {rec.target} was removed")
            reply = await asyncio.to_thread(responder, rec.command)
            if not isinstance(reply, NodeReply):
                raise TypeError(f"the responder returned {type(reply).__name__}, not NodeReply")
        except Exception as exc:  # noqa: BLE001 - a broken responder ends the session, as a failed command would
            self._set(error=repr(exc))
            await self._close_channel(f"Unable to start command: {exc}", outcome="command_error")
            return
        if reply.delay > 0:
            await asyncio.sleep(reply.delay)

        await self._send_output(reply)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.all_acked.wait(), self.fake.ack_wait)
        await self._close_channel("", outcome="completed")

    @staticmethod
    def _parse_open(first: str | None) -> dict[str, Any] | None:
        if first is None:
            return None
        try:
            value = json.loads(first)
        except ValueError:
            return None
        if not isinstance(value, dict) or value.get("MessageSchemaVersion") != "1.0":
            return None
        return value

    async def _next_input(self, payload_type: int) -> Frame:
        while True:
            frame = await self.inbox.get()
            if frame.payload_type == payload_type:
                return frame
            # The agent drops stream data that arrives before the handshake has completed.

    def _check_handshake(self, frame: Frame) -> list[str]:
        try:
            response = frame.json()
            actions = response.get("ProcessedClientActions") or []
            if not isinstance(actions, list):
                raise TypeError("ProcessedClientActions is not a list")
        except (ValueError, TypeError, AttributeError) as exc:
            return [f"Unmarshalling of HandshakeResponse message failed, {exc}"]
        self._set(handshake_response=response)
        problems = []
        for action in actions:
            if not isinstance(action, dict):
                problems.append("a ProcessedClientAction is not an object")
            elif action.get("ActionStatus") != ACTION_SUCCESS:
                problems.append(
                    f"{action.get('ActionType')} failed on client with status {action.get('ActionStatus')} "
                    f"error: {action.get('Error', '')}"
                )
        if self.faults.kms_required and not problems:
            kms = [a for a in actions if isinstance(a, dict) and a.get("ActionType") == "KMSEncryption"]
            if not kms:
                problems.append("KMSEncryption was requested but the client did not answer it")
            else:
                problems.append("Fetching data key failed: the fake SSM agent cannot use KMS encryption")
        return problems

    async def _send_output(self, reply: NodeReply) -> None:
        rec = self.rec
        size = self.faults.chunk_size or self.fake.chunk_size
        separate = rec.separate_requested and not self.faults.no_separate_streams
        self._set(separate_used=separate)
        plan: list[tuple[int, bytes]] = []
        if separate:
            out, err = _chunks(reply.stdout + reply.stdout_tail, size), _chunks(reply.stderr, size)
            for index in range(max(len(out), len(err))):  # the agent's two pipes race; interleave them
                if index < len(out):
                    plan.append((P_OUTPUT, out[index]))
                if index < len(err):
                    plan.append((P_STDERR, err[index]))
            plan.append((P_EXIT_CODE, f"EXIT_CODE: {reply.exit_code}".encode()))
        else:
            merged = reply.stdout + reply.stderr + reply.stdout_tail
            plan.extend((P_OUTPUT, chunk) for chunk in _chunks(merged, size))
        seqs = [self._make_data(ptype, payload) for ptype, payload in plan]
        if self.faults.out_of_order:
            window = self.faults.reorder_window
            seqs = [seq for start in range(0, len(seqs), window) for seq in reversed(seqs[start : start + window])]
        corrupt = seqs and self.faults.bad_digest
        target_seq = min(seqs) if corrupt else None
        for count, seq in enumerate(seqs, 1):
            await self._transmit(seq, corrupt=seq == target_seq)
            if count % 32 == 0:
                await asyncio.sleep(0)  # let acknowledges in


class _ApiHandler(BaseHTTPRequestHandler):
    """AWS JSON 1.1: ``POST /`` with ``X-Amz-Target: AmazonSSM.<Operation>``. One request per
    connection (HTTP/1.0), so stop() never waits on an idle keep-alive connection."""

    fake: FakeSsm
    server_version = "Server"
    sys_version = ""
    timeout = 30

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, payload = self.fake._dispatch(self.path, self.headers, body)
        hook = self.fake.on_request
        if hook is not None:
            hook("POST", self.path, dict(self.headers.items()), body, status, payload)
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED)

    def log_message(self, format: str, *args: Any) -> None:
        return
