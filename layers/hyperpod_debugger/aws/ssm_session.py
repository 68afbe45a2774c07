"""Run one non-interactive command on a node through Session Manager, without the plugin binary.

``ssm.start_session`` with ``AWS-StartNonInteractiveCommand`` returns a data-channel websocket URL
and a token; this module opens that websocket (SigV4-signed like the official plugin), answers the
agent's handshake, acknowledges and reorders the agent's frames, and collects stdout, stderr and
the exit code. The frame codec lives in :mod:`hyperpod_debugger.aws.ssm_protocol`.

How the command reaches the node: the agent's NonInteractiveCommands plugin does not hand the
command line to a shell; it splits it with shell-like quoting rules and executes the first word
(aws/amazon-ssm-agent ``agent/session/shell/shell_unix.go``). To learn the exit status even when
the agent does not report it (older agents, or no ``separateOutputStream``), the command is sent
as ``sh -c '<wrapper>' sh <command>``: the wrapper runs ``"$@"`` (exactly the words the agent would
have run), prints ``__HPD_RC_<nonce>=<status>`` on a line of its own and exits with that status.
The caller's command text is left untouched at the end of the line. The marker line is removed
from stdout before the result is returned.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import threading
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError, ClientError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from hyperpod_debugger.aws import ssm_protocol as proto
from hyperpod_debugger.aws.errors import DENIED_CODES, THROTTLED_CODES, error_code
from hyperpod_debugger.aws.ssm_types import DOCUMENT, CommandResult, Outcome, SessionError

log = logging.getLogger(__name__)
#: The websocket library's own logger for our connections. At DEBUG it dumps frames, and the
#: first frame carries the session token, so it never goes below INFO.
_ws_log = logging.getLogger(f"{__name__}.websocket")
_ws_log.setLevel(logging.INFO)

#: SigV4 service name of the data-channel endpoint.
SIGNING_SERVICE = "ssmmessages"
#: Sent in the open-channel frame and the handshake response. Agents compare it with dotted
#: plugin versions (1.2.312.0 is the first the agent treats as understanding separate stdout/stderr).
CLIENT_VERSION = "1.2.312.0"
#: Unacknowledged outgoing data frames are sent again this often.
RETRANSMIT_INTERVAL = 1.0
#: After the exit-status marker shows up without an ExitCode frame, wait this long for the
#: channel to close before returning anyway.
MARKER_GRACE = 3.0
#: Bounds for the cleanup that runs after the session, whatever happened.
CLOSE_TIMEOUT = 2.0
TERMINATE_TIMEOUT = 10.0
OPEN_TIMEOUT = 15.0
#: Out-of-order frames kept while waiting for a gap to fill (the agent's own limit).
INCOMING_BUFFER_LIMIT = 10_000
#: damaged frames (digest mismatch) tolerated per session before the channel is given up
MAX_DAMAGED_FRAMES = 50
MAX_FRAME_BYTES = 8 * 1024 * 1024

ENCRYPTION_REQUIRED_MESSAGE = (
    "session encryption (KMS) is required by the account's Session Manager preferences; "
    "this client does not implement it"
)
_SEPARATE_PARAMETER = "separateOutputStream"
_RETRY_WITHOUT_SEPARATE_CODES = frozenset({"InvalidParameters", "ValidationException"})
_PRESIGN_PARAMS = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
    "X-Amz-Security-Token",
)
_MARKER_PREFIX = "__HPD_RC_"
#: Long enough to hold one whole marker line across a frame boundary.
_MARKER_WINDOW = 128


# --------------------------------------------------------------------------- the command line


#: The shell program of the wrapper; ``{nonce}`` is filled in per call. No single quote inside.
_WRAPPER = 'rc=0; "$@" || rc=$?; printf "\\n' + _MARKER_PREFIX + '{nonce}=%s\\n" "$rc"; exit "$rc"'


def wrap_command(command: str, nonce: str) -> str:
    """The command line actually sent: ``sh -c '<wrapper>' sh <command>`` (see the module doc)."""
    if not re.fullmatch(r"[0-9a-f]{8,32}", nonce):
        raise ValueError("the nonce must be 8 to 32 lowercase hex digits")
    return "sh -c '" + _WRAPPER.replace("{nonce}", nonce) + "' sh " + command


def marker_pattern(nonce: str) -> re.Pattern[bytes]:
    return re.compile(rb"\n" + re.escape(f"{_MARKER_PREFIX}{nonce}=".encode()) + rb"(-?\d{1,10})\n")


def _check_command(command: str) -> None:
    if not command.strip():
        raise ValueError("empty command")
    if any(c in command for c in "\r\n\x00"):
        raise ValueError("AWS-StartNonInteractiveCommand runs one line: the command must not contain line breaks")


def _preview(command: str, limit: int = 48) -> str:
    """What the logs may show of a command: its start and its length, never the whole text."""
    head = command[:limit].replace("\n", " ")
    return f"{head}{'…' if len(command) > limit else ''} ({len(command)} chars)"


# --------------------------------------------------------------------------- SigV4 for the upgrade


def is_presigned(url: str) -> bool:
    query = parse_qs(urlsplit(url).query, keep_blank_values=True)
    return any(name in query for name in _PRESIGN_PARAMS)


def sigv4_headers(url: str, credentials: Any, region: str) -> dict[str, str]:
    """SigV4 headers (``ssmmessages``, ``region``) for a GET of ``url``'s https form, as the
    plugin signs its websocket upgrade. ``Host`` is left to the websocket client, which sends the
    same value the signature covers."""
    parts = urlsplit(url)
    scheme = {"wss": "https", "ws": "http"}.get(parts.scheme.lower(), parts.scheme)
    http_url = urlunsplit((scheme, parts.netloc, parts.path or "/", parts.query, ""))
    frozen = credentials.get_frozen_credentials() if hasattr(credentials, "get_frozen_credentials") else credentials
    request = AWSRequest(method="GET", url=http_url)
    SigV4Auth(frozen, SIGNING_SERVICE, region).add_auth(request)
    return {name: value for name, value in request.headers.items() if name.lower() != "host"}


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


# --------------------------------------------------------------------------- output collection


class _Output:
    """stdout and stderr as they arrive, kept up to a shared byte budget, plus a scan of the
    whole stdout stream (kept or not) for the exit-status marker."""

    def __init__(self, limit: int, marker: re.Pattern[bytes]) -> None:
        self.limit = max(0, limit)
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.stdout_seen = 0
        self.stderr_seen = 0
        self._marker_re = marker
        self._tail = b""
        #: (start, end, status) of the last marker, in stdout-stream offsets
        self.marker: tuple[int, int, int] | None = None

    def _room(self) -> int:
        return max(0, self.limit - len(self.stdout) - len(self.stderr))

    def add_stdout(self, data: bytes) -> None:
        self.stdout += data[: self._room()]
        window = self._tail + data
        window_start = self.stdout_seen - len(self._tail)
        for match in self._marker_re.finditer(window):
            self.marker = (window_start + match.start(), window_start + match.end(), int(match.group(1)))
        self.stdout_seen += len(data)
        self._tail = window[-_MARKER_WINDOW:]

    def add_stderr(self, data: bytes) -> None:
        self.stderr += data[: self._room()]
        self.stderr_seen += len(data)

    @property
    def marker_status(self) -> int | None:
        return self.marker[2] if self.marker else None

    def finish(self) -> tuple[bytes, bytes, bool]:
        """(stdout without the marker line, stderr, truncated)."""
        stdout = bytes(self.stdout)
        seen = self.stdout_seen + self.stderr_seen
        if self.marker is not None:
            start, end, _ = self.marker
            kept = len(stdout)
            stdout = stdout[: min(kept, start)] + (stdout[end:kept] if kept > end else b"")
            seen -= end - start
        truncated = seen > len(stdout) + len(self.stderr)
        return stdout, bytes(self.stderr), truncated


# --------------------------------------------------------------------------- start_session


@dataclass(frozen=True, slots=True)
class _Started:
    session_id: str
    token: str
    stream_url: str
    separate: bool


class _StartCall:
    """Shared between the event loop and the worker thread that calls ``start_session``: if the
    caller gave up (timeout, cancellation) before the call returned, the thread ends the session
    it created itself, so no session outlives the command."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.abandoned = False
        self.session_id: str | None = None


def _terminate_quietly(ssm: Any, session_id: str) -> None:
    try:
        ssm.terminate_session(SessionId=session_id)
        log.debug("ssm: terminated session %s", session_id)
    except Exception as exc:  # noqa: BLE001 - cleanup must never replace the session's own outcome
        log.warning("ssm: terminate_session(%s) failed: %s", session_id, exc)


def _start_blocking(ssm: Any, kwargs: dict[str, Any], state: _StartCall) -> dict[str, Any]:
    response = ssm.start_session(**kwargs)
    session_id = response.get("SessionId") if isinstance(response, dict) else None
    with state.lock:
        orphan = state.abandoned
        if not orphan:
            state.session_id = session_id
    if orphan and session_id:
        log.info("ssm: session %s started after its caller gave up; terminating it", session_id)
        _terminate_quietly(ssm, session_id)
    return response


def _endpoint(ssm: Any) -> str:
    return str(getattr(getattr(ssm, "meta", None), "endpoint_url", None) or "the SSM endpoint")


def _client_error(exc: ClientError, target: str) -> SessionError:
    code = error_code(exc)
    message = str(exc.response.get("Error", {}).get("Message", "")) or str(exc)
    outcome: Outcome
    if code == "TargetNotConnected":
        outcome = "UNREACHABLE"
    elif code in THROTTLED_CODES:
        outcome = "THROTTLED"
    elif code in DENIED_CODES:
        outcome = "DENIED"
    else:
        outcome = "ERROR"
    return SessionError(outcome, f"StartSession on {target}: {code or 'error'}: {message}")


# --------------------------------------------------------------------------- one session


@dataclass
class _Pending:
    frame: bytes
    sequence_number: int
    last_sent: float | None = None
    sends: int = 0


class _Session:
    def __init__(
        self,
        ssm: Any,
        target: str,
        command: str,
        *,
        credentials: Any | None,
        region: str,
        max_output: int,
        separate_streams: bool,
        document: str | None = None,
        nonce: str | None = None,
    ) -> None:
        self.ssm = ssm
        self.target = target
        #: a pinned Session document that carries the wrapped command itself (nothing is sent)
        self.document = document
        self.nonce = nonce or secrets.token_hex(8)
        self.wire_command = wrap_command(command, self.nonce)
        self.credentials = credentials
        self.region = region
        self.separate_requested = separate_streams
        self.output = _Output(max_output, marker_pattern(self.nonce))
        self.phase = "starting the session"
        self.session_id: str | None = None
        self.ws: ClientConnection | None = None
        self.client_id = str(uuid.uuid4())
        self.damaged_frames = 0
        # incoming data stream
        self.expected = 0
        self.buffered: dict[int, proto.ClientMessage] = {}
        # outgoing data stream
        self.next_seq = 0
        self.outgoing: dict[int, _Pending] = {}
        self.paused = False
        # what the agent told us
        self.handshake_done = False
        self.exit_code: int | None = None
        self.saw_stderr = False
        self.closed_output: str | None = None
        self.finished = False
        self.marker_deadline: float | None = None

    # ---------------------------------------------------------------- lifecycle

    async def run(self) -> CommandResult:
        started = await self._start()
        self.phase = "opening the data channel"
        self.ws = await self._open(started)
        await self.ws.send(
            proto.open_data_channel_text(started.token, client_id=self.client_id, client_version=CLIENT_VERSION)
        )
        self.phase = "waiting for the agent's handshake"
        return await self._converse()

    async def close(self) -> None:
        """Close the websocket and end the session; bounded, never raises."""
        if self.ws is not None:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT + 1):
                    await self.ws.close()
            except (TimeoutError, OSError, WebSocketException) as exc:
                log.debug("ssm: closing the data channel of %s: %s", self.session_id, exc)
        if self.session_id:
            try:
                async with asyncio.timeout(TERMINATE_TIMEOUT):
                    await asyncio.to_thread(_terminate_quietly, self.ssm, self.session_id)
            except TimeoutError:
                log.warning("ssm: terminate_session(%s) did not return within %ss", self.session_id, TERMINATE_TIMEOUT)

    # ---------------------------------------------------------------- start_session

    async def _start(self) -> _Started:
        if self.document is not None:
            # The document fixes the command and asks for separate streams; an agent too old for them
            # merges the output, and the marker (the document's own nonce) still gives the exit status.
            try:
                response = await self._start_once({"Target": self.target, "DocumentName": self.document})
            except ClientError as exc:
                raise _client_error(exc, self.target) from exc
            except BotoCoreError as exc:
                raise SessionError("ERROR", f"StartSession on {self.target} via {_endpoint(self.ssm)}: {exc}") from exc
            return self._started(response, self.separate_requested)
        separate = self.separate_requested
        retried = False
        while True:
            parameters: dict[str, list[str]] = {"command": [self.wire_command]}
            if separate:
                parameters[_SEPARATE_PARAMETER] = ["true"]
            kwargs = {"Target": self.target, "DocumentName": DOCUMENT, "Parameters": parameters}
            try:
                response = await self._start_once(kwargs)
            except ClientError as exc:
                code = error_code(exc)
                message = str(exc.response.get("Error", {}).get("Message", ""))
                if (
                    separate
                    and not retried
                    and code in _RETRY_WITHOUT_SEPARATE_CODES
                    and _SEPARATE_PARAMETER.lower() in message.lower()
                ):
                    log.info(
                        "ssm: %s rejects %s (%s); retrying with merged output", self.target, _SEPARATE_PARAMETER, code
                    )
                    separate, retried = False, True
                    continue
                raise _client_error(exc, self.target) from exc
            except BotoCoreError as exc:
                raise SessionError("ERROR", f"StartSession on {self.target} via {_endpoint(self.ssm)}: {exc}") from exc
            return self._started(response, separate)

    async def _start_once(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        state = _StartCall()
        try:
            return await asyncio.to_thread(_start_blocking, self.ssm, kwargs, state)
        except asyncio.CancelledError:
            with state.lock:
                state.abandoned = True
                if state.session_id:  # the call returned just as we gave up: clean up in close()
                    self.session_id = state.session_id
            raise

    def _started(self, response: Any, separate: bool) -> _Started:
        if not isinstance(response, dict):
            raise SessionError("ERROR", f"StartSession on {self.target} returned {type(response).__name__}")
        session_id = response.get("SessionId")
        if isinstance(session_id, str) and session_id:
            self.session_id = session_id
        token, url = response.get("TokenValue"), response.get("StreamUrl")
        if not self.session_id or not isinstance(token, str) or not token or not isinstance(url, str) or not url:
            raise SessionError("ERROR", f"StartSession on {self.target} returned no SessionId/TokenValue/StreamUrl")
        log.info(
            "ssm: session %s on %s (%s output)", self.session_id, self.target, "separate" if separate else "merged"
        )
        return _Started(self.session_id, token, url, separate)

    # ---------------------------------------------------------------- the websocket

    async def _open(self, started: _Started) -> ClientConnection:
        url = started.stream_url
        headers: dict[str, str] = {}
        if self.credentials is not None and not is_presigned(url):
            headers = await asyncio.to_thread(sigv4_headers, url, self.credentials, self.region)
        shown = _redact_url(url)
        try:
            return await connect(
                url,
                additional_headers=headers,
                open_timeout=OPEN_TIMEOUT,
                close_timeout=CLOSE_TIMEOUT,
                max_size=MAX_FRAME_BYTES,
                compression=None,
                logger=_ws_log,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            outcome: Outcome = "DENIED" if status in (401, 403) else "ERROR"
            raise SessionError(outcome, f"data channel {shown} refused the connection: HTTP {status}") from exc
        except TimeoutError as exc:
            raise SessionError(
                "ERROR", f"data channel {shown}: no websocket handshake within {OPEN_TIMEOUT:g}s"
            ) from exc
        except (OSError, WebSocketException) as exc:
            raise SessionError("ERROR", f"cannot open the data channel {shown}: {exc}") from exc

    async def _converse(self) -> CommandResult:
        ws = self.ws
        assert ws is not None
        loop = asyncio.get_running_loop()
        try:
            while not self.finished:
                await self._flush()
                wait = self._next_wakeup(loop.time())
                try:
                    async with asyncio.timeout(wait):
                        raw = await ws.recv()
                except TimeoutError:
                    if self.marker_deadline is not None and loop.time() >= self.marker_deadline:
                        log.info("ssm: %s: exit status from the marker; the channel did not close", self.session_id)
                        self.finished = True
                    continue
                await self._on_frame(raw, loop.time())
        except ConnectionClosed as exc:
            how = f"code {exc.rcvd.code}" if exc.rcvd else "no close frame"
            return self._result(f"the data channel closed ({how})")
        return self._result("the session ended")

    def _next_wakeup(self, now: float) -> float | None:
        times = []
        if not self.paused:
            for pending in self.outgoing.values():
                due = (now if pending.last_sent is None else pending.last_sent) + RETRANSMIT_INTERVAL
                times.append(max(0.0, due - now))
        if self.marker_deadline is not None:
            times.append(max(0.0, self.marker_deadline - now))
        return min(times) if times else None

    async def _send(self, message: proto.ClientMessage) -> None:
        assert self.ws is not None
        await self.ws.send(proto.encode_message(message))

    async def _send_data(self, payload_type: proto.PayloadType, payload: bytes) -> None:
        message = proto.data_message(proto.INPUT_STREAM_DATA, self.next_seq, payload_type, payload)
        self.outgoing[message.sequence_number] = _Pending(proto.encode_message(message), message.sequence_number)
        self.next_seq += 1
        await self._flush()

    async def _flush(self) -> None:
        """(Re)send every unacknowledged outgoing frame that is due, unless publication is paused."""
        if self.paused or not self.outgoing:
            return
        assert self.ws is not None
        now = asyncio.get_running_loop().time()
        for seq in sorted(self.outgoing):
            pending = self.outgoing[seq]
            if pending.last_sent is not None and now - pending.last_sent < RETRANSMIT_INTERVAL:
                continue
            if pending.sends:
                log.debug("ssm: %s: resending input #%d (attempt %d)", self.session_id, seq, pending.sends + 1)
            await self.ws.send(pending.frame)
            pending.last_sent, pending.sends = now, pending.sends + 1

    # ---------------------------------------------------------------- incoming frames

    async def _on_frame(self, raw: str | bytes, now: float) -> None:
        if isinstance(raw, str):
            log.debug("ssm: %s: ignoring a text frame (%d chars)", self.session_id, len(raw))
            return
        try:
            message = proto.decode_message(raw)
        except proto.DigestMismatch as exc:
            # Dropped unacknowledged: the agent resends it. Only a channel that keeps damaging frames fails.
            self.damaged_frames += 1
            log.warning("ssm: %s: dropped a damaged frame (%s)", self.session_id, exc)
            if self.damaged_frames > MAX_DAMAGED_FRAMES:
                raise SessionError("ERROR", f"{self.target}: the data channel keeps damaging frames: {exc}") from exc
            return
        except proto.ProtocolError as exc:
            raise SessionError("ERROR", f"{self.target}: malformed frame on the data channel: {exc}") from exc
        kind = message.message_type
        if kind == proto.OUTPUT_STREAM_DATA:
            await self._on_data(message, now)
        elif kind == proto.ACKNOWLEDGE:
            self._on_ack(message)
        elif kind == proto.CHANNEL_CLOSED:
            closed = proto.parse_channel_closed(message.payload)
            self.closed_output = closed.output
            log.info("ssm: %s: channel closed%s", self.session_id, f": {closed.output}" if closed.output else "")
            self.finished = True
        elif kind == proto.PAUSE_PUBLICATION:
            log.debug("ssm: %s: publication paused", self.session_id)
            self.paused = True
        elif kind == proto.START_PUBLICATION:
            log.debug("ssm: %s: publication resumed", self.session_id)
            self.paused = False
        else:
            log.debug("ssm: %s: ignoring a %s message", self.session_id, kind)

    def _on_ack(self, message: proto.ClientMessage) -> None:
        try:
            ack = proto.parse_acknowledgement(message.payload)
        except proto.ProtocolError as exc:
            log.warning("ssm: %s: unreadable acknowledge: %s", self.session_id, exc)
            return
        acked = ack.message_type in ("", proto.INPUT_STREAM_DATA)
        if acked and self.outgoing.pop(ack.sequence_number, None) is not None:
            log.debug("ssm: %s: input #%d acknowledged", self.session_id, ack.sequence_number)

    async def _on_data(self, message: proto.ClientMessage, now: float) -> None:
        seq = message.sequence_number
        if seq > self.expected and seq not in self.buffered and len(self.buffered) >= INCOMING_BUFFER_LIMIT:
            log.warning("ssm: %s: reorder buffer full; dropping #%d unacknowledged", self.session_id, seq)
            return
        await self._send(proto.acknowledge_message(message))  # duplicates too: our first ack may be lost
        if seq < self.expected:
            log.debug("ssm: %s: duplicate output #%d", self.session_id, seq)
            return
        if seq > self.expected:
            self.buffered.setdefault(seq, message)
            return
        await self._deliver(message, now)
        self.expected += 1
        while self.expected in self.buffered:
            await self._deliver(self.buffered.pop(self.expected), now)
            self.expected += 1

    async def _deliver(self, message: proto.ClientMessage, now: float) -> None:
        kind, payload = message.payload_type, message.payload
        if kind in (proto.PayloadType.OUTPUT, proto.PayloadType.STDERR, proto.PayloadType.ERROR):
            if kind == proto.PayloadType.OUTPUT:
                self.output.add_stdout(payload)
            else:
                self.saw_stderr = self.saw_stderr or kind == proto.PayloadType.STDERR
                self.output.add_stderr(payload)
            if self.output.marker is not None:  # the grace runs from the last output, not the marker
                self.marker_deadline = now + MARKER_GRACE
        elif kind == proto.PayloadType.EXIT_CODE:
            try:
                self.exit_code = proto.parse_exit_code(payload)
            except proto.ProtocolError as exc:
                log.warning("ssm: %s: %s", self.session_id, exc)
                return
            log.info("ssm: %s: exit code %d", self.session_id, self.exit_code)
            self.finished = True
        elif kind == proto.PayloadType.HANDSHAKE_REQUEST:
            await self._answer_handshake(payload)
        elif kind == proto.PayloadType.HANDSHAKE_COMPLETE:
            complete = proto.parse_handshake_complete(payload)
            self.handshake_done = True
            self.phase = "waiting for the command's output"
            log.debug(
                "ssm: %s: handshake complete in %.3fs%s",
                self.session_id,
                complete.time_to_complete_ns / 1e9,
                f" ({complete.customer_message.strip()})" if complete.customer_message.strip() else "",
            )
        elif kind == proto.PayloadType.ENC_CHALLENGE_REQUEST:
            raise SessionError("ENCRYPTION_REQUIRED", ENCRYPTION_REQUIRED_MESSAGE)
        else:
            log.debug("ssm: %s: ignoring payload type %d", self.session_id, kind)

    async def _answer_handshake(self, payload: bytes) -> None:
        try:
            request = proto.parse_handshake_request(payload)
        except proto.ProtocolError as exc:
            raise SessionError("ERROR", f"{self.target}: {exc}") from exc
        processed: list[proto.ProcessedAction] = []
        errors: list[str] = []
        kms = False
        for action in request.actions:
            if action.action_type == proto.ACTION_SESSION_TYPE:
                processed.append(proto.ProcessedAction(action.action_type, proto.ActionStatus.SUCCESS))
            else:
                kms = kms or action.action_type == proto.ACTION_KMS_ENCRYPTION
                error = f"{action.action_type} is not supported by this client"
                processed.append(proto.ProcessedAction(action.action_type, proto.ActionStatus.UNSUPPORTED, None, error))
                errors.append(error)
        log.debug(
            "ssm: %s: handshake from agent %s, session type %s, actions %s",
            self.session_id,
            request.agent_version or "?",
            request.session_type or "?",
            [a.action_type for a in request.actions],
        )
        await self._send_data(
            proto.PayloadType.HANDSHAKE_RESPONSE, proto.handshake_response_payload(CLIENT_VERSION, processed, errors)
        )
        if kms:
            raise SessionError("ENCRYPTION_REQUIRED", ENCRYPTION_REQUIRED_MESSAGE)

    # ---------------------------------------------------------------- the result

    def _result(self, how: str) -> CommandResult:
        stdout, stderr, truncated = self.output.finish()
        code = self.exit_code if self.exit_code is not None else self.output.marker_status
        if code is None:
            said = f": {self.closed_output}" if self.closed_output else ""
            raise SessionError("ERROR", f"{self.target}: {how} without an exit code ({self.phase}){said}")
        if truncated:
            log.info("ssm: %s: output over %d bytes; the rest was dropped", self.session_id, self.output.limit)
        separated = self.separate_requested and (self.exit_code is not None or self.saw_stderr)
        return CommandResult(exit_code=code, stdout=stdout, stderr=stderr, truncated=truncated, separated=separated)


# --------------------------------------------------------------------------- the entry point


async def run_command(
    ssm: Any,
    target: str,
    command: str,
    *,
    credentials: Any | None,
    region: str,
    timeout: float = 180.0,
    max_output: int = 4 * 1024 * 1024,
    separate_streams: bool = True,
    document: str | None = None,
    nonce: str | None = None,
) -> CommandResult:
    """Run ``command`` (one line) on ``target`` through ``AWS-StartNonInteractiveCommand``, or, with
    ``document``, through that pinned Session document, which carries ``command`` wrapped with
    ``nonce`` itself (:mod:`hyperpod_debugger.aws.ssm_documents`): then nothing but the document's
    name is sent.

    ``timeout`` bounds everything from ``start_session`` to the end of the session; cleanup
    (closing the websocket, ``terminate_session``) always follows and has its own small bound.
    Raises :class:`SessionError` with the outcome UNREACHABLE, THROTTLED, DENIED,
    ENCRYPTION_REQUIRED, TIMEOUT or ERROR; :class:`ValueError` for a command that cannot be sent.
    """
    _check_command(command)
    session = _Session(
        ssm,
        target,
        command,
        credentials=credentials,
        region=region,
        max_output=max_output,
        separate_streams=separate_streams,
        document=document,
        nonce=nonce,
    )
    log.info("ssm: running %s on %s%s", _preview(command), target, f" (document {document})" if document else "")
    scope = asyncio.timeout(timeout)
    try:
        async with scope:
            return await session.run()
    except TimeoutError as exc:
        if scope.expired():
            raise SessionError("TIMEOUT", f"{target}: no result within {timeout:g}s ({session.phase})") from None
        raise SessionError("ERROR", f"{target}: timed out {session.phase}: {exc}") from exc
    finally:
        await session.close()
