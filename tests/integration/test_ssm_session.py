"""The Session Manager client against a tiny in-test agent on a loopback websocket.

The agent speaks the data-channel protocol from :mod:`hyperpod_debugger.aws.ssm_protocol` and, in
its default mode, really executes the command line it was given the way the SSM agent's
NonInteractiveCommands plugin does (split with shell quoting rules, no shell, stdout/stderr as
separate payloads when ``separateOutputStream`` is set, then ``EXIT_CODE: <n>``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import shlex
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import Stubber
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from hyperpod_debugger.aws import ssm_protocol as proto
from hyperpod_debugger.aws import ssm_session
from hyperpod_debugger.aws.ssm_session import ENCRYPTION_REQUIRED_MESSAGE, run_command
from hyperpod_debugger.aws.ssm_types import CommandResult, SessionError
from tests.ssm_agent_side import (
    channel_closed_payload,
    exit_code_payload,
    handshake_complete_payload,
    handshake_request_payload,
    parse_handshake_response,
)

TARGET = "sagemaker-cluster:abcdef123456_workers-i-0123456789abcdef0"
REGION = "us-west-2"
P = proto.PayloadType

_quiet = logging.getLogger("tests.fake_agent")
_quiet.setLevel(logging.WARNING)


# --------------------------------------------------------------------------- fake control plane


class FakeSSM:
    """``start_session``/``terminate_session`` like a boto3 SSM client, pointing at the test agent."""

    def __init__(self, errors: list[Exception] | None = None) -> None:
        self.port = 0
        self.errors = list(errors or [])
        self.started: list[dict[str, Any]] = []
        self.terminated: list[str] = []
        self.meta = SimpleNamespace(endpoint_url="https://ssm.us-west-2.amazonaws.com")

    def token(self, session_id: str) -> str:
        return f"secret-token-{session_id}"

    def start_session(self, **kwargs: Any) -> dict[str, Any]:
        self.started.append(kwargs)
        if self.errors:
            raise self.errors.pop(0)
        sid = f"hpd-{len(self.started)}-0a1b2c3d"
        url = f"ws://127.0.0.1:{self.port}/v1/data-channel/{sid}?role=publish_subscribe&cell-number=AAEAAQ"
        return {"SessionId": sid, "TokenValue": self.token(sid), "StreamUrl": url}

    def terminate_session(self, SessionId: str) -> dict[str, Any]:  # noqa: N803 - boto3's casing
        self.terminated.append(SessionId)
        return {"SessionId": SessionId}

    def parameters(self, session_id: str) -> dict[str, list[str]]:
        index = int(session_id.split("-")[1]) - 1
        return self.started[index]["Parameters"]


def client_error(code: str, message: str = "boom", operation: str = "StartSession") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}, "ResponseMetadata": {}}, operation)


# --------------------------------------------------------------------------- the agent


@dataclass
class Behaviour:
    kms: bool = False
    drop_first_response: bool = False
    pause_first: bool = False
    chunk: int = 1024
    order: str = "in"  # in | reverse | shuffle
    duplicate: bool = False
    bad_digest: bool = False
    hang: bool = False
    old_agent: bool = False  # ignores separateOutputStream: merged output, no ExitCode payload
    scripted: list[tuple[int, bytes]] | None = None
    close_output: str = ""
    send_channel_closed: bool = True
    hang_up: bool = False  # close the websocket after the output, no channel_closed
    reject_upgrade: int | None = None  # answer the websocket upgrade with this HTTP status


@dataclass
class Record:
    headers: dict[str, str] = field(default_factory=dict)
    path: str = ""
    opening: dict[str, Any] = field(default_factory=dict)
    inputs: list[tuple[float, proto.ClientMessage]] = field(default_factory=list)
    acks: list[int] = field(default_factory=list)
    sent_seqs: list[int] = field(default_factory=list)
    inputs_while_paused: int = -1
    errors: list[str] = field(default_factory=list)


class Channel:
    def __init__(self, ws: ServerConnection, record: Record) -> None:
        self.ws, self.record, self.seq = ws, record, 0
        self.unread: list[proto.ClientMessage] = []

    def frame(self, payload_type: int, payload: bytes) -> proto.ClientMessage:
        message = proto.data_message(proto.OUTPUT_STREAM_DATA, self.seq, payload_type, payload)
        self.seq += 1
        return message

    async def send(self, message: proto.ClientMessage, *, corrupt: bool = False) -> None:
        raw = bytearray(proto.encode_message(message))
        if corrupt:
            raw[80] ^= 0xFF  # first digest byte
        await self.ws.send(bytes(raw))
        self.record.sent_seqs.append(message.sequence_number)

    async def control(self, kind: str, payload: bytes = b"") -> None:
        await self.ws.send(proto.encode_message(proto.ClientMessage(kind, payload=payload)))

    async def ack(self, message: proto.ClientMessage) -> None:
        await self.ws.send(proto.encode_message(proto.acknowledge_message(message)))

    def _note(self, raw: bytes | str) -> proto.ClientMessage | None:
        assert isinstance(raw, bytes), "the client sends only binary frames after the opening"
        message = proto.decode_message(raw)
        if message.message_type == proto.ACKNOWLEDGE:
            self.record.acks.append(proto.parse_acknowledgement(message.payload).sequence_number)
            return None
        assert message.message_type == proto.INPUT_STREAM_DATA, message.message_type
        self.record.inputs.append((time.monotonic(), message))
        return message

    async def listen(self, seconds: float) -> None:
        """Read (and keep) whatever the client sends during ``seconds``."""
        try:
            async with asyncio.timeout(seconds):
                while True:
                    message = self._note(await self.ws.recv())
                    if message is not None:
                        self.unread.append(message)
        except TimeoutError:
            pass

    async def next_input(self) -> proto.ClientMessage:
        if self.unread:
            return self.unread.pop(0)
        while True:
            message = self._note(await self.ws.recv())
            if message is not None:
                return message

    async def drain(self) -> None:
        while True:
            self._note(await self.ws.recv())


async def execute(command: str, separate: bool) -> list[tuple[int, bytes]]:
    """Run a command line the way the NonInteractiveCommands plugin does: split, exec, no shell."""
    argv = shlex.split(command)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE if separate else asyncio.subprocess.STDOUT,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None  # communicate() waited for the exit
    pieces: list[tuple[int, bytes]] = [(P.OUTPUT, out)]
    if separate:
        pieces += [(P.STDERR, err), (P.EXIT_CODE, exit_code_payload(proc.returncode))]
    return pieces


class Agent:
    def __init__(self, ssm: FakeSSM, behaviour: Behaviour) -> None:
        self.ssm, self.behaviour = ssm, behaviour
        self.records: list[Record] = []
        self.active = 0
        self.idle = asyncio.Event()
        self.idle.set()

    async def handler(self, ws: ServerConnection) -> None:
        self.active += 1
        self.idle.clear()
        request = ws.request
        assert request is not None  # the opening handshake is done before the handler runs
        record = Record(headers={k: v for k, v in request.headers.raw_items()}, path=request.path)
        self.records.append(record)
        try:
            record.opening = json.loads(await ws.recv())
            session_id = request.path.split("?")[0].rsplit("/", 1)[-1]
            if record.opening.get("TokenValue") != self.ssm.token(session_id):
                await ws.close(4003, "bad token")
                return
            channel = Channel(ws, record)
            await self.script(channel, session_id)
            await channel.drain()
        except ConnectionClosed:
            pass
        except Exception as exc:  # surfaced by the tests through record.errors
            record.errors.append(repr(exc))
            raise
        finally:
            self.active -= 1
            if not self.active:
                self.idle.set()

    async def script(self, ch: Channel, session_id: str) -> None:
        b = self.behaviour
        if b.pause_first:
            await ch.control(proto.PAUSE_PUBLICATION)
        actions: list[tuple[str, Any]] = [
            ("SessionType", {"SessionType": "NonInteractiveCommands", "Properties": None}),
        ]
        if b.kms:
            actions.append(("KMSEncryption", {"KMSKeyId": "arn:aws:kms:us-west-2:111122223333:key/abc"}))
        await ch.send(ch.frame(P.HANDSHAKE_REQUEST, handshake_request_payload("3.3.1142.0", actions)))
        if b.pause_first:
            await ch.listen(0.3)
            ch.record.inputs_while_paused = len(ch.record.inputs)
            await ch.control(proto.START_PUBLICATION)
        response = await ch.next_input()
        if b.drop_first_response:  # pretend it was lost: no ack, wait for the retransmission
            response = await ch.next_input()
        await ch.ack(response)
        if b.kms:
            return
        await ch.send(ch.frame(P.HANDSHAKE_COMPLETE, handshake_complete_payload(2_000_000)))
        if b.hang:
            await ch.ws.wait_closed()
            return
        if b.scripted is not None:
            pieces = b.scripted
        else:
            parameters = self.ssm.parameters(session_id)
            separate = parameters.get("separateOutputStream") == ["true"] and not b.old_agent
            pieces = await execute(parameters["command"][0], separate)
        frames = []
        for kind, data in pieces:
            size = len(data) if kind == P.EXIT_CODE else b.chunk  # the exit code is one frame
            frames += [ch.frame(kind, data[i : i + size]) for i in range(0, len(data), size)]
        if b.bad_digest:
            # a damaged copy first, then the agent's retransmission of the same frame
            await ch.send(frames[0], corrupt=True)
        if b.order == "reverse":
            frames.reverse()
        elif b.order == "shuffle":
            random.Random(7).shuffle(frames)
        for message in frames:
            await ch.send(message)
            if b.duplicate:
                await ch.send(message)
        if b.hang_up:
            await ch.ws.close()
        elif b.send_channel_closed:
            await ch.control(proto.CHANNEL_CLOSED, channel_closed_payload(session_id, b.close_output))

    def process_request(self, connection: ServerConnection, request: Any) -> Any:
        if self.behaviour.reject_upgrade:
            return connection.respond(self.behaviour.reject_upgrade, "no\n")
        return None


# --------------------------------------------------------------------------- harness


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def other_tasks() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


@dataclass
class Outcome:
    result: CommandResult | None
    error: SessionError | None
    elapsed: float
    agent: Agent
    ssm: Any

    @property
    def record(self) -> Record:
        assert len(self.agent.records) == 1, f"{len(self.agent.records)} data channels opened"
        return self.agent.records[0]


def run_session(
    behaviour: Behaviour | None = None,
    *,
    command: str = "bash -c 'echo out; echo err >&2; exit 3'",
    ssm: Any = None,
    credentials: Any = None,
    timeout: float = 20.0,
    max_output: int = 4 * 1024 * 1024,
    separate_streams: bool = True,
) -> Outcome:
    ssm = ssm if ssm is not None else FakeSSM()
    agent = Agent(ssm, behaviour or Behaviour())

    async def main() -> Outcome:
        async with serve(
            agent.handler, "127.0.0.1", 0, logger=_quiet, compression=None, process_request=agent.process_request
        ) as server:
            ssm.port = server.sockets[0].getsockname()[1]
            fds_before = open_fds()
            start = time.monotonic()
            result = error = None
            try:
                result = await run_command(
                    ssm,
                    TARGET,
                    command,
                    credentials=credentials,
                    region=REGION,
                    timeout=timeout,
                    max_output=max_output,
                    separate_streams=separate_streams,
                )
            except SessionError as exc:
                error = exc
            elapsed = time.monotonic() - start
            # no socket and no task may outlive the call (the agent's side is given a moment to notice)
            async with asyncio.timeout(3):
                await agent.idle.wait()
            await asyncio.sleep(0)
            assert other_tasks() == set(), other_tasks()
            assert open_fds() == fds_before
        for record in agent.records:
            assert not record.errors, record.errors
        return Outcome(result, error, elapsed, agent, ssm)

    return asyncio.run(main())


def assert_terminated(outcome: Outcome) -> None:
    """The session that was started is terminated, once."""
    created = [f"hpd-{i}-0a1b2c3d" for i, _ in enumerate(outcome.ssm.started, 1)][-1:]
    assert outcome.ssm.terminated == created, (outcome.ssm.terminated, created)


# --------------------------------------------------------------------------- normal runs


def test_separate_streams_stdout_stderr_and_exit_code():
    outcome = run_session()
    assert outcome.error is None
    assert outcome.result == CommandResult(exit_code=3, stdout=b"out\n", stderr=b"err\n", separated=True)
    assert_terminated(outcome)
    (started,) = outcome.ssm.started
    assert started["Target"] == TARGET and started["DocumentName"] == "AWS-StartNonInteractiveCommand"
    assert started["Parameters"]["separateOutputStream"] == ["true"]
    (wire,) = started["Parameters"]["command"]
    assert wire.endswith(" sh bash -c 'echo out; echo err >&2; exit 3'") and "\n" not in wire
    record = outcome.record
    assert record.opening["TokenValue"] == "secret-token-hpd-1-0a1b2c3d"
    assert record.opening["MessageSchemaVersion"] == "1.0"
    assert {"RequestId", "ClientId", "ClientVersion"} <= set(record.opening)
    # every agent data frame was acknowledged
    assert set(record.acks) == set(record.sent_seqs) == set(range(len(record.sent_seqs)))
    # the handshake response
    (_, response), *_ = record.inputs
    assert (response.sequence_number, response.payload_type, response.flags) == (0, 6, proto.FLAG_SYN)
    version, actions, errors = parse_handshake_response(response.payload)
    assert version == ssm_session.CLIENT_VERSION and errors == []
    assert [(a.action_type, a.status) for a in actions] == [("SessionType", proto.ActionStatus.SUCCESS)]
    assert "Authorization" not in record.headers  # no credentials, no signature


def test_merged_streams_take_the_exit_code_from_the_marker():
    outcome = run_session(separate_streams=False)
    assert outcome.error is None
    assert outcome.result == CommandResult(exit_code=3, stdout=b"out\nerr\n", stderr=b"", separated=False)
    assert "separateOutputStream" not in outcome.ssm.started[0]["Parameters"]
    assert_terminated(outcome)


def test_separate_requested_but_agent_ignores_it_falls_back_to_the_marker():
    outcome = run_session(Behaviour(old_agent=True), command="sh -c 'echo hi; exit 4'")
    assert outcome.result == CommandResult(exit_code=4, stdout=b"hi\n", stderr=b"", separated=False)
    assert_terminated(outcome)


def test_marker_without_channel_closed_ends_after_a_grace(monkeypatch):
    monkeypatch.setattr(ssm_session, "MARKER_GRACE", 0.2)
    outcome = run_session(Behaviour(old_agent=True, send_channel_closed=False), command="echo hi")
    assert outcome.result == CommandResult(exit_code=0, stdout=b"hi\n", stderr=b"", separated=False)
    assert_terminated(outcome)


def test_chunked_output_in_many_small_frames():
    command = "sh -c 'seq 1 2000; seq 1 300 >&2'"
    outcome = run_session(Behaviour(chunk=7), command=command)
    expected_out = "".join(f"{i}\n" for i in range(1, 2001)).encode()
    expected_err = "".join(f"{i}\n" for i in range(1, 301)).encode()
    assert outcome.result == CommandResult(exit_code=0, stdout=expected_out, stderr=expected_err)
    assert len(outcome.record.sent_seqs) > 1000
    assert set(outcome.record.acks) == set(outcome.record.sent_seqs)
    assert_terminated(outcome)


@pytest.mark.parametrize("order", ["reverse", "shuffle"])
def test_out_of_order_delivery_is_reassembled(order):
    command = "sh -c 'seq 1 500; echo oops >&2; exit 2'"
    outcome = run_session(Behaviour(chunk=16, order=order), command=command)
    assert outcome.result == CommandResult(
        exit_code=2, stdout="".join(f"{i}\n" for i in range(1, 501)).encode(), stderr=b"oops\n"
    )
    assert_terminated(outcome)


def test_duplicate_frames_are_dropped_but_acknowledged_again():
    outcome = run_session(Behaviour(chunk=4, duplicate=True), command="sh -c 'echo abcdefghij; exit 0'")
    assert outcome.result == CommandResult(exit_code=0, stdout=b"abcdefghij\n", stderr=b"")
    record = outcome.record
    last = max(record.sent_seqs)  # the exit code: the client may be gone before its copy arrives
    duplicated = [seq for seq in set(record.sent_seqs) if record.sent_seqs.count(seq) == 2 and seq != last]
    assert len(duplicated) >= 3
    assert all(record.acks.count(seq) == 2 for seq in duplicated)
    assert_terminated(outcome)


def test_lost_ack_of_the_handshake_response_is_retransmitted():
    outcome = run_session(Behaviour(drop_first_response=True))
    assert outcome.result == CommandResult(exit_code=3, stdout=b"out\n", stderr=b"err\n")
    (t1, first), (t2, second), *_ = outcome.record.inputs
    assert second.sequence_number == first.sequence_number == 0
    assert second.message_id == first.message_id and second.payload == first.payload
    assert 0.5 <= t2 - t1 <= 3.0
    assert_terminated(outcome)


def test_pause_publication_holds_the_handshake_response():
    outcome = run_session(Behaviour(pause_first=True))
    assert outcome.record.inputs_while_paused == 0
    assert outcome.result is not None and outcome.result.exit_code == 3
    assert_terminated(outcome)


# --------------------------------------------------------------------------- failures


def test_a_damaged_frame_is_dropped_and_its_retransmission_used():
    # GIVEN the agent's first output frame arrives damaged (digest mismatch), then intact
    outcome = run_session(Behaviour(bad_digest=True))
    # THEN the damaged copy is ignored (not acknowledged, as the plugin does) and the session completes
    assert outcome.error is None and outcome.result is not None
    assert_terminated(outcome)


def test_kms_encryption_required():
    outcome = run_session(Behaviour(kms=True))
    assert outcome.error is not None
    assert (outcome.error.outcome, outcome.error.message) == ("ENCRYPTION_REQUIRED", ENCRYPTION_REQUIRED_MESSAGE)
    (_, response), *_ = outcome.record.inputs
    _, actions, errors = parse_handshake_response(response.payload)
    assert [(a.action_type, a.status) for a in actions] == [
        ("SessionType", proto.ActionStatus.SUCCESS),
        ("KMSEncryption", proto.ActionStatus.UNSUPPORTED),
    ]
    assert errors and actions[1].error
    assert_terminated(outcome)


def test_hung_agent_times_out():
    outcome = run_session(Behaviour(hang=True), timeout=1.0)
    assert outcome.error is not None and outcome.error.outcome == "TIMEOUT"
    assert "1s" in outcome.error.message
    assert_terminated(outcome)


def test_channel_closed_without_exit_code_is_an_error_with_its_output():
    scripted = [(P.OUTPUT, b"partial output\n")]
    outcome = run_session(Behaviour(scripted=scripted, close_output="Command execution failed"))
    assert outcome.error is not None and outcome.error.outcome == "ERROR"
    assert "Command execution failed" in outcome.error.message
    assert_terminated(outcome)


def test_hang_up_without_exit_code_is_an_error():
    outcome = run_session(Behaviour(scripted=[(P.OUTPUT, b"some output\n")], hang_up=True))
    assert outcome.error is not None and outcome.error.outcome == "ERROR"
    assert "closed" in outcome.error.message and "without an exit code" in outcome.error.message
    assert_terminated(outcome)


@pytest.mark.parametrize(("status", "expected"), [(403, "DENIED"), (502, "ERROR")])
def test_rejected_upgrade(status, expected):
    outcome = run_session(Behaviour(reject_upgrade=status))
    assert outcome.error is not None and outcome.error.outcome == expected
    assert f"HTTP {status}" in outcome.error.message
    assert "cell-number" not in outcome.error.message  # the URL is shown without its query
    assert outcome.agent.records == []
    assert_terminated(outcome)


def test_unreachable_data_channel_names_the_endpoint():
    class Closed(FakeSSM):
        def start_session(self, **kwargs: Any) -> dict[str, Any]:
            response = super().start_session(**kwargs)
            response["StreamUrl"] = response["StreamUrl"].replace(f":{self.port}/", ":1/")
            return response

    outcome = run_session(ssm=Closed())
    assert outcome.error is not None and outcome.error.outcome == "ERROR"
    assert "ws://127.0.0.1:1/v1/data-channel/hpd-1-0a1b2c3d" in outcome.error.message
    assert_terminated(outcome)


def test_timeout_during_start_session_still_ends_the_session():
    class Slow(FakeSSM):
        def start_session(self, **kwargs: Any) -> dict[str, Any]:
            time.sleep(1.0)
            return super().start_session(**kwargs)

    ssm = Slow()
    outcome = run_session(ssm=ssm, timeout=0.3)
    assert outcome.error is not None and outcome.error.outcome == "TIMEOUT"
    assert "starting the session" in outcome.error.message
    # the worker thread finished the call after the caller gave up and ended the session itself
    assert ssm.terminated == ["hpd-1-0a1b2c3d"]


def test_large_output_is_truncated_but_completes():
    outcome = run_session(command="head -c 2097152 /dev/zero", max_output=1024 * 1024)
    result = outcome.result
    assert result is not None
    assert (result.exit_code, result.truncated, len(result.stdout), result.stderr) == (0, True, 1024 * 1024, b"")
    record = outcome.record
    assert len(record.sent_seqs) > 2048
    assert set(record.acks) == set(record.sent_seqs)  # kept acknowledging past the limit
    assert_terminated(outcome)


def test_large_merged_output_still_finds_the_marker():
    outcome = run_session(command="head -c 2097152 /dev/zero", max_output=1024 * 1024, separate_streams=False)
    result = outcome.result
    assert result is not None
    assert (result.exit_code, result.truncated, len(result.stdout), result.separated) == (0, True, 1024 * 1024, False)


# --------------------------------------------------------------------------- start_session errors


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (client_error("TargetNotConnected", f"{TARGET} is not connected."), "UNREACHABLE"),
        (client_error("ThrottlingException", "Rate exceeded"), "THROTTLED"),
        (client_error("AccessDeniedException", "not authorized to perform: ssm:StartSession"), "DENIED"),
        (client_error("InvalidDocument", "document not found"), "ERROR"),
        (client_error("InvalidParameters", "command is too long"), "ERROR"),
    ],
)
def test_start_session_errors_are_mapped(error, outcome):
    result = run_session(ssm=FakeSSM(errors=[error]))
    assert result.error is not None and result.error.outcome == outcome
    assert error.response["Error"]["Code"] in result.error.message
    assert len(result.ssm.started) == 1 and result.ssm.terminated == []  # no session was created
    assert result.agent.records == []


def test_endpoint_connection_error_names_the_endpoint():
    error = EndpointConnectionError(endpoint_url="https://ssm.us-west-2.amazonaws.com/")
    outcome = run_session(ssm=FakeSSM(errors=[error]))
    assert outcome.error is not None and outcome.error.outcome == "ERROR"
    assert "https://ssm.us-west-2.amazonaws.com" in outcome.error.message


@pytest.mark.parametrize("code", ["InvalidParameters", "ValidationException"])
def test_separate_output_stream_rejected_retries_merged(code):
    error = client_error(code, "Parameter separateOutputStream is not defined in the document")
    outcome = run_session(ssm=FakeSSM(errors=[error]))
    assert outcome.error is None
    assert outcome.result == CommandResult(exit_code=3, stdout=b"out\nerr\n", stderr=b"", separated=False)
    first, second = outcome.ssm.started
    assert first["Parameters"]["separateOutputStream"] == ["true"]
    assert "separateOutputStream" not in second["Parameters"]
    assert first["Parameters"]["command"] == second["Parameters"]["command"]
    assert_terminated(outcome)


def test_real_boto3_client_with_stubber():
    client = boto3.client("ssm", region_name=REGION)
    fake = FakeSSM()
    stubber = Stubber(client)

    class Bridge:  # the real client validates the request shapes; the fake supplies the URL
        meta = client.meta

        def start_session(self, **kwargs: Any) -> dict[str, Any]:
            response = fake.start_session(**kwargs)
            stubber.add_response("start_session", response, kwargs)
            return client.start_session(**kwargs)

        def terminate_session(self, SessionId: str) -> dict[str, Any]:  # noqa: N803
            fake.terminate_session(SessionId)
            stubber.add_response("terminate_session", {"SessionId": SessionId}, {"SessionId": SessionId})
            return client.terminate_session(SessionId=SessionId)

    with stubber:
        outcome = run_session(ssm=_PortForwarder(Bridge(), fake))
    assert outcome.result == CommandResult(exit_code=3, stdout=b"out\n", stderr=b"err\n")
    assert fake.terminated == ["hpd-1-0a1b2c3d"]
    stubber.assert_no_pending_responses()


class _PortForwarder:
    """Lets the harness set the agent's port on the fake behind a bridge."""

    def __init__(self, bridge: Any, fake: FakeSSM) -> None:
        self._bridge, self._fake = bridge, fake
        self.meta = bridge.meta
        self.started = fake.started
        self.terminated = fake.terminated

    @property
    def port(self) -> int:
        return self._fake.port

    @port.setter
    def port(self, value: int) -> None:
        self._fake.port = value

    def token(self, session_id: str) -> str:
        return self._fake.token(session_id)

    def parameters(self, session_id: str) -> dict[str, list[str]]:
        return self._fake.parameters(session_id)

    def start_session(self, **kwargs: Any) -> dict[str, Any]:
        return self._bridge.start_session(**kwargs)

    def terminate_session(self, SessionId: str) -> dict[str, Any]:  # noqa: N803
        return self._bridge.terminate_session(SessionId=SessionId)


def test_terminate_errors_are_swallowed():
    class Failing(FakeSSM):
        def terminate_session(self, SessionId: str) -> dict[str, Any]:  # noqa: N803
            super().terminate_session(SessionId)
            raise client_error("InternalServerError", operation="TerminateSession")

    outcome = run_session(ssm=Failing())
    assert outcome.result is not None and outcome.result.exit_code == 3
    assert_terminated(outcome)


# --------------------------------------------------------------------------- signing and logging


def test_upgrade_is_sigv4_signed_when_credentials_are_given():
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "session-token-xyz")
    outcome = run_session(credentials=creds)
    assert outcome.result is not None and outcome.result.exit_code == 3
    headers = {k.lower(): v for k, v in outcome.record.headers.items()}
    date = headers["x-amz-date"]
    assert headers["x-amz-security-token"] == "session-token-xyz"
    request = AWSRequest(
        method="GET",
        url=f"http://{headers['host']}{outcome.record.path}",
        headers={"X-Amz-Date": date, "X-Amz-Security-Token": "session-token-xyz"},
    )
    request.context["timestamp"] = date
    signer = SigV4Auth(creds.get_frozen_credentials(), "ssmmessages", REGION)
    signature = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    assert headers["authorization"] == (
        f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{date[:8]}/{REGION}/ssmmessages/aws4_request, "
        f"SignedHeaders=host;x-amz-date;x-amz-security-token, Signature={signature}"
    )
    assert_terminated(outcome)


def test_logs_never_carry_the_token_or_the_whole_command(caplog):
    caplog.set_level(logging.DEBUG)
    command = "sh -c 'echo " + "Z" * 300 + "; exit 0'"
    outcome = run_session(command=command)
    assert outcome.result is not None and outcome.result.exit_code == 0
    ours = [r for r in caplog.records if not r.name.startswith("tests.")]
    text = "\n".join(r.getMessage() for r in ours)
    assert "secret-token-" not in text
    assert command not in text
    assert any("hpd-1-0a1b2c3d" in r.getMessage() for r in ours)


def test_multiline_commands_are_refused_before_any_call():
    ssm = FakeSSM()
    with pytest.raises(ValueError, match="line"):
        asyncio.run(run_command(ssm, TARGET, "echo a\necho b", credentials=None, region=REGION))
    assert ssm.started == []
