"""The fake Session Manager (``sim/hyperpod_sim/fake_ssm.py``) on its own: boto3 drives the API, and a small
websocket client written here, with its own framing, drives the data channel."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from hyperpod_sim.fake_ssm import (
    DOCUMENT,
    ExitMarker,
    FakeSsm,
    Faults,
    FrameError,
    NodeReply,
    decode_frame,
    encode_frame,
    find_exit_marker,
    marker_aware,
    with_exit_marker,
)

TARGET = "sagemaker-cluster:abcdef123456_workers-i-0123456789abcdef0"
OTHER = "sagemaker-cluster:abcdef123456_workers-i-0fedcba9876543210"
REGION = "us-west-2"
MARKER = "printf '\\n__HPD_RC_7f3a9c=%s\\n' $?"
# The product client's wrapper: runs the words after `sh`, prints the marker, exits with their status.
WRAPPER = 'sh -c \'rc=0; "$@" || rc=$?; printf "\\n__HPD_RC_0123abcd=%s\\n" "$rc"; exit "$rc"\' sh '


# ---------------------------------------------------------------------------------------------------
# A minimal client, with framing written independently of the fake's
# ---------------------------------------------------------------------------------------------------

_HDR = struct.Struct(">I32sIQqQ16s32sII")


def pack(mtype: str, payload: bytes = b"", *, seq: int = 0, flags: int = 0, ptype: int = 0) -> bytes:
    raw_id = uuid.uuid4().bytes
    return (
        _HDR.pack(
            116,
            mtype.encode().ljust(32),
            1,
            int(time.time() * 1000),
            seq,
            flags,
            raw_id[8:] + raw_id[:8],
            hashlib.sha256(payload).digest(),
            ptype,
            len(payload),
        )
        + payload
    )


@dataclass
class Msg:
    mtype: str
    seq: int
    flags: int
    mid: uuid.UUID
    digest: bytes
    ptype: int
    payload: bytes


def unpack(raw: bytes) -> Msg:
    hl, name, _ver, _created, seq, flags, mid, digest, ptype, plen = _HDR.unpack_from(raw)
    payload = raw[hl + 4 :]
    assert hl == 116 and plen == len(payload)
    return Msg(name.decode().strip(), seq, flags, uuid.UUID(bytes=mid[8:] + mid[:8]), digest, ptype, payload)


def answer_ok(request: dict[str, Any]) -> dict[str, Any] | None:
    processed = []
    for action in request["RequestedClientActions"]:
        if action["ActionType"] == "SessionType":
            processed.append({"ActionType": "SessionType", "ActionStatus": 1, "ActionResult": None, "Error": ""})
        else:
            processed.append(
                {"ActionType": action["ActionType"], "ActionStatus": 3, "ActionResult": None, "Error": "not supported"}
            )
    return {"ClientVersion": "1.2.0.0-test", "ProcessedClientActions": processed, "Errors": []}


@dataclass
class Result:
    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int | None = None
    closed_output: str | None = None
    close_code: int | None = None
    arrivals: list[int] = field(default_factory=list)  # output_stream_data sequence numbers as they came
    duplicates: int = 0
    bad_digests: int = 0
    retransmits: int = 0
    handshake_request: dict[str, Any] | None = None
    handshake_complete: dict[str, Any] | None = None
    control: list[str] = field(default_factory=list)
    payloads: list[tuple[int, bytes]] = field(default_factory=list)  # (payload type, payload), in sequence order


async def run_client(
    url: str,
    token: str,
    *,
    handshake: Callable[[dict[str, Any]], dict[str, Any] | None] = answer_ok,
    retransmit_after: float | None = 0.3,
    verify_digest: bool = True,
    headers: dict[str, str] | None = None,
    timeout: float = 15.0,
    after_handshake: list[tuple[int, int, bytes]] | None = None,
) -> Result:
    """Open the channel, answer the handshake, acknowledge everything, reorder, drop duplicates,
    retransmit our own data; return what the agent sent. ``after_handshake``: raw (seq, payload type,
    payload) input frames to send, in that order, once our HandshakeResponse is out."""
    res = Result()
    async with connect(url, additional_headers=headers, max_size=None, compression=None) as ws:
        open_message = {
            "MessageSchemaVersion": "1.0",
            "RequestId": str(uuid.uuid4()),
            "TokenValue": token,
            "ClientId": str(uuid.uuid4()),
            "ClientVersion": "1.2.0.0-test",
        }
        await ws.send(json.dumps(open_message))
        expected, my_seq = 0, 0
        buffered: dict[int, Msg] = {}
        unacked: dict[int, list[Any]] = {}

        async def send_input(ptype: int, payload: bytes) -> None:
            nonlocal my_seq
            raw = pack("input_stream_data", payload, seq=my_seq, ptype=ptype)
            unacked[my_seq] = [raw, time.monotonic()]
            my_seq += 1
            await ws.send(raw)

        async def process(msg: Msg) -> None:
            res.payloads.append((msg.ptype, msg.payload))
            if msg.ptype == 5:
                res.handshake_request = json.loads(msg.payload)
                answer = handshake(res.handshake_request)
                if answer is not None:
                    await send_input(6, json.dumps(answer).encode())
                    for seq, ptype, payload in after_handshake or []:
                        raw = pack("input_stream_data", payload, seq=seq, ptype=ptype)
                        unacked[seq] = [raw, time.monotonic()]
                        await ws.send(raw)
            elif msg.ptype == 7:
                res.handshake_complete = json.loads(msg.payload)
            elif msg.ptype == 1:
                res.stdout += msg.payload
            elif msg.ptype == 11:
                res.stderr += msg.payload
            elif msg.ptype == 12:
                res.exit_code = int(msg.payload.decode().split(":")[1])

        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError("the session did not end")
            try:
                raw = await asyncio.wait_for(ws.recv(), 0.05)
            except TimeoutError:
                raw = None
            except ConnectionClosed:
                break
            if isinstance(raw, bytes):
                msg = unpack(raw)
                if verify_digest and msg.payload and hashlib.sha256(msg.payload).digest() != msg.digest:
                    res.bad_digests += 1
                elif msg.mtype == "acknowledge":
                    unacked.pop(json.loads(msg.payload)["AcknowledgedMessageSequenceNumber"], None)
                elif msg.mtype == "output_stream_data":
                    res.arrivals.append(msg.seq)
                    ack = {
                        "AcknowledgedMessageType": msg.mtype,
                        "AcknowledgedMessageId": str(msg.mid),
                        "AcknowledgedMessageSequenceNumber": msg.seq,
                        "IsSequentialMessage": True,
                    }
                    await ws.send(pack("acknowledge", json.dumps(ack).encode(), flags=3))
                    if msg.seq == expected:
                        await process(msg)
                        expected += 1
                        while expected in buffered:
                            await process(buffered.pop(expected))
                            expected += 1
                    elif msg.seq > expected:
                        buffered.setdefault(msg.seq, msg)
                    else:
                        res.duplicates += 1
                elif msg.mtype == "channel_closed":
                    res.closed_output = json.loads(msg.payload)["Output"]
                    break  # as the plugin does: the session is over, close our side
                else:
                    res.control.append(msg.mtype)
            if retransmit_after is not None:
                now = time.monotonic()
                for item in unacked.values():
                    if now - item[1] > retransmit_after:
                        item[1] = now
                        res.retransmits += 1
                        await ws.send(item[0])
    res.close_code = ws.close_code
    return res


# ---------------------------------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------------------------------


def ssm_client(fake: FakeSsm, retries: int = 1):
    return boto3.client(
        "ssm",
        endpoint_url=fake.endpoint_url,
        region_name=REGION,
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"mode": "standard", "total_max_attempts": retries}),
    )


@pytest.fixture
def fake():
    with FakeSsm(
        start_session_rate=None, retransmit_after=0.2, handshake_timeout=5.0, ack_wait=5.0, close_grace=0.5
    ) as service:
        yield service
        assert service.internal_errors == []


@pytest.fixture
def ssm(fake):
    return ssm_client(fake)


def start(ssm, command: str = "uname -r", *, target: str = TARGET, separate: bool = True) -> dict[str, Any]:
    parameters = {"command": [command], "separateOutputStream": ["true" if separate else "false"]}
    return ssm.start_session(Target=target, DocumentName=DOCUMENT, Parameters=parameters)


def session(
    fake: FakeSsm,
    ssm,
    reply: NodeReply | Callable[[str], NodeReply],
    command: str = "uname -r",
    *,
    faults: Faults | None = None,
    separate: bool = True,
    **client_options: Any,
) -> tuple[Result, Any]:
    fake.add_node(TARGET, reply, faults=faults)
    started = start(ssm, command, separate=separate)
    result = asyncio.run(run_client(started["StreamUrl"], started["TokenValue"], **client_options))
    return result, fake.wait_session_done(started["SessionId"])


def error_code(exc_info) -> str:
    return exc_info.value.response["Error"]["Code"]


# ---------------------------------------------------------------------------------------------------
# Framing
# ---------------------------------------------------------------------------------------------------


def test_frame_layout_matches_an_independent_encoder():
    # GIVEN a message built by hand with this file's own layout
    mid = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    # WHEN the fake encodes the same message
    raw = encode_frame(
        "output_stream_data",
        b"hi",
        sequence_number=7,
        flags=1,
        payload_type=11,
        message_id=mid,
        created_ms=1_700_000_000_000,
    )
    # THEN the bytes are the documented layout: HL 116, the id's low half first, payload at offset 120
    assert struct.unpack_from(">I", raw)[0] == 116
    assert raw[4:36] == b"output_stream_data".ljust(32, b" ")
    assert raw[64:80] == bytes.fromhex("8899aabbccddeeff0011223344556677")
    assert raw[80:112] == hashlib.sha256(b"hi").digest()
    assert struct.unpack_from(">II", raw, 112) == (11, 2)
    assert raw[120:] == b"hi"
    msg = unpack(raw)
    assert (msg.mtype, msg.seq, msg.flags, msg.mid, msg.ptype, msg.payload) == (
        "output_stream_data",
        7,
        1,
        mid,
        11,
        b"hi",
    )
    # AND the fake decodes what this file's encoder builds
    frame = decode_frame(pack("input_stream_data", b"abc", seq=3, ptype=6))
    assert (frame.message_type, frame.sequence_number, frame.payload_type, frame.payload) == (
        "input_stream_data",
        3,
        6,
        b"abc",
    )


@pytest.mark.parametrize(
    "mutate",
    [
        lambda raw: raw[:100],  # short
        lambda raw: struct.pack(">I", 120) + raw[4:],  # wrong header length
        lambda raw: raw[:116] + struct.pack(">I", 99) + raw[120:],  # payload length lies
        lambda raw: raw[:120] + b"X" + raw[121:],  # digest mismatch
    ],
)
def test_decode_refuses_malformed_frames(mutate):
    with pytest.raises(FrameError):
        decode_frame(mutate(pack("input_stream_data", b"payload", ptype=1)))


# ---------------------------------------------------------------------------------------------------
# The exit-code marker for merged output
# ---------------------------------------------------------------------------------------------------


def test_suffix_marker_is_found_only_at_the_end_of_the_command():
    command = f"bash -c 'echo x | base64 -d'; {MARKER}"
    assert find_exit_marker(command) == ExitMarker("bash -c 'echo x | base64 -d'", "\\n__HPD_RC_7f3a9c=%s\\n", False)
    assert find_exit_marker("nvidia-smi -L") is None
    assert find_exit_marker(f"{MARKER} && echo later") is None


def test_wrapper_marker_gives_the_words_it_runs():
    command = WRAPPER + "bash -c 'echo eA== | base64 -d | bash'"
    assert find_exit_marker(command) == ExitMarker(
        "bash -c 'echo eA== | base64 -d | bash'", "\\n__HPD_RC_0123abcd=%s\\n", True
    )
    # a plain `sh -c` without "$@" and printf is not a marker
    assert find_exit_marker("sh -c 'uptime' sh") is None
    assert find_exit_marker("sh -c 'echo hi; exit 3' sh x") is None


def test_with_exit_marker_prints_the_status_like_a_shell():
    # the suffix form: printf's own status becomes the line's, as on a real node
    reply = with_exit_marker(f"false; {MARKER}", NodeReply(b"out\n", b"err\n", 3, 0.5))
    assert reply == NodeReply(b"out\n", b"err\n", 0, 0.5, stdout_tail=b"\n__HPD_RC_7f3a9c=3\n")
    # the wrapper exits with the body's status
    reply = with_exit_marker(WRAPPER + "false", NodeReply(b"", b"", 3))
    assert (reply.stdout_tail, reply.exit_code) == (b"\n__HPD_RC_0123abcd=3\n", 3)
    unchanged = NodeReply(b"a", b"b", 2)
    assert with_exit_marker("true", unchanged) is unchanged


def test_marker_aware_hands_the_bare_command_to_the_responder():
    seen = []

    def responder(command: str) -> NodeReply:
        seen.append(command)
        return NodeReply(b"ok\n", b"", 4)

    reply = marker_aware(responder)(f"df -h /fsx; {MARKER}")
    assert (reply.stdout, reply.stdout_tail, reply.exit_code) == (b"ok\n", b"\n__HPD_RC_7f3a9c=4\n", 0)
    reply = marker_aware(responder)(WRAPPER + "nvidia-smi -L")
    assert (reply.stdout_tail, reply.exit_code) == (b"\n__HPD_RC_0123abcd=4\n", 4)
    assert seen == ["df -h /fsx", "nvidia-smi -L"]


# ---------------------------------------------------------------------------------------------------
# The API
# ---------------------------------------------------------------------------------------------------


def test_start_session_returns_the_real_shapes(fake, ssm):
    # GIVEN a registered node
    fake.add_node(TARGET, NodeReply(b"", b"", 0))
    # WHEN a session is started
    started = start(ssm, "nvidia-smi -L")
    # THEN the id, token and stream URL look like the service's
    assert started["SessionId"].startswith(fake.principal + "-")
    assert len(started["SessionId"].rsplit("-", 1)[1]) == 17
    assert len(started["TokenValue"]) > 300
    prefix = f"ws://127.0.0.1:{fake.ws_port}/v1/data-channel/{started['SessionId']}?role=publish_subscribe&cell-number="
    assert started["StreamUrl"].startswith(prefix)
    rec = fake.session(started["SessionId"])
    assert (rec.target, rec.command, rec.separate_requested, rec.region) == (TARGET, "nvidia-smi -L", True, REGION)
    assert [target for _, target in fake.started] == [TARGET]
    # AND DescribeSessions lists it as active until TerminateSession
    active = ssm.describe_sessions(State="Active")["Sessions"]
    assert [(s["SessionId"], s["Status"]) for s in active] == [(started["SessionId"], "Connecting")]
    assert ssm.terminate_session(SessionId=started["SessionId"])["SessionId"] == started["SessionId"]
    assert fake.terminated == {started["SessionId"]}
    history = ssm.describe_sessions(State="History", Filters=[{"key": "Target", "value": TARGET}])["Sessions"]
    assert [s["Status"] for s in history] == ["Terminated"]
    assert ssm.describe_sessions(State="Active")["Sessions"] == []


def test_unknown_target_is_not_connected(fake, ssm):
    with pytest.raises(ClientError) as exc_info:
        start(ssm, target=OTHER)
    assert error_code(exc_info) == "TargetNotConnected"
    assert exc_info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert OTHER in exc_info.value.response["Error"]["Message"]
    assert fake.started == [] and [c.error for c in fake.start_calls] == ["TargetNotConnected"]


@pytest.mark.parametrize(
    ("faults", "code"),
    [(Faults(not_connected=True), "TargetNotConnected"), (Faults(access_denied=True), "AccessDeniedException")],
)
def test_node_faults_refuse_start_session(fake, ssm, faults, code):
    fake.add_node(TARGET, NodeReply(), faults=faults)
    fake.add_node(OTHER, NodeReply())
    with pytest.raises(ClientError) as exc_info:
        start(ssm)
    assert error_code(exc_info) == code
    start(ssm, target=OTHER)  # the other node is unaffected


def test_service_wide_access_denied_applies_to_every_target(fake, ssm):
    fake.set_faults(Faults(access_denied=True))
    fake.add_node(TARGET, NodeReply())
    for target in (TARGET, OTHER):
        with pytest.raises(ClientError) as exc_info:
            start(ssm, target=target)
        assert error_code(exc_info) == "AccessDeniedException"
        assert "ssm:StartSession" in exc_info.value.response["Error"]["Message"]


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"DocumentName": "SSM-SessionManagerRunShell"}, "InvalidDocument"),
        ({"DocumentName": DOCUMENT, "Parameters": {"command": ["a", "b"]}}, "InvalidParameters"),
        (
            {"DocumentName": DOCUMENT, "Parameters": {"command": ["a"], "separateOutputStream": ["yes"]}},
            "InvalidParameters",
        ),
        ({"DocumentName": DOCUMENT, "Parameters": {"command": ["a"], "portNumber": ["22"]}}, "InvalidParameters"),
        ({"DocumentName": DOCUMENT}, "InvalidParameters"),
    ],
)
def test_bad_requests_are_refused(fake, ssm, kwargs, code):
    fake.add_node(TARGET, NodeReply())
    with pytest.raises(ClientError) as exc_info:
        ssm.start_session(Target=TARGET, **kwargs)
    assert error_code(exc_info) == code


def test_throttle_first_n_per_node_then_succeeds(fake, ssm):
    # GIVEN a node whose first two StartSession calls are throttled
    fake.add_node(TARGET, NodeReply(), faults=Faults(throttle_first_n=2))
    fake.add_node(OTHER, NodeReply())
    # WHEN we call three times without SDK retries
    codes = []
    for _ in range(3):
        try:
            start(ssm)
            codes.append(None)
        except ClientError as exc:
            codes.append(exc.response["Error"]["Code"])
    # THEN the first two are ThrottlingException and the third succeeds; other nodes are never throttled
    assert codes == ["ThrottlingException", "ThrottlingException", None]
    start(ssm, target=OTHER)


def test_service_wide_throttle_is_retried_by_the_sdk(fake):
    # GIVEN the first two StartSession calls (any target) throttled, and an SDK allowed 3 attempts
    fake.set_faults(Faults(throttle_first_n=2))
    fake.add_node(TARGET, NodeReply())
    # WHEN one start_session call is made
    started = start(ssm_client(fake, retries=3))
    # THEN the SDK's own retries get through on the third attempt
    assert [c.error for c in fake.start_calls] == ["ThrottlingException", "ThrottlingException", None]
    assert fake.start_calls[-1].session_id == started["SessionId"]


def test_start_session_rate_limit():
    # GIVEN a limit of 5 StartSession calls per second
    with FakeSsm(start_session_rate=5.0) as service:
        service.add_node(TARGET, NodeReply())
        ssm = ssm_client(service)
        # WHEN 10 calls go out back to back
        codes = []
        for _ in range(10):
            try:
                start(ssm)
                codes.append("ok")
            except ClientError as exc:
                codes.append(exc.response["Error"]["Code"])
        # THEN the burst of 5 passes, and beyond what the bucket refilled meanwhile, calls are throttled
        assert codes[:5] == ["ok"] * 5
        # (how many got through against the bucket's refill is timed in bench/timing_bench.py)
        assert set(codes) == {"ok", "ThrottlingException"}
        assert sum(1 for call in service.start_calls if call.error == "ThrottlingException") == codes.count(
            "ThrottlingException"
        )
        # AND after a second the bucket has refilled
        time.sleep(1.0)
        start(ssm)
        assert service.internal_errors == []


# ---------------------------------------------------------------------------------------------------
# The data channel
# ---------------------------------------------------------------------------------------------------


def test_separate_streams_stdout_stderr_and_exit_code(fake, ssm):
    # GIVEN a node that prints to both streams and exits 3
    # WHEN a client runs a session with separateOutputStream
    result, rec = session(fake, ssm, NodeReply(b"GPU 0: H100\n", b"warning\n", 3))
    # THEN stdout, stderr and the exit code arrive apart, then channel_closed with no error
    assert (result.stdout, result.stderr, result.exit_code) == (b"GPU 0: H100\n", b"warning\n", 3)
    assert result.closed_output == "" and result.close_code == 1000
    assert result.control == ["start_publication"]
    # AND the handshake carried the documented fields
    assert result.handshake_request == {
        "AgentVersion": fake.agent_version,
        "RequestedClientActions": [
            {
                "ActionType": "SessionType",
                "ActionParameters": {"SessionType": "NonInteractiveCommands", "Properties": None},
            }
        ],
    }
    assert set(result.handshake_complete) == {"HandshakeTimeToComplete", "CustomerMessage"}
    # AND the agent acked our handshake response, and got our acks for all its data, ids matching
    assert rec.outcome == "completed" and rec.status == "Terminated" and rec.separate_used is True
    assert rec.handshake_response["ClientVersion"] == "1.2.0.0-test"
    assert sorted(rec.acks_received) == [seq for seq, _ in rec.sent] and rec.ack_id_mismatches == []
    assert rec.unacked_at_close == 0
    assert rec.open_message["MessageSchemaVersion"] == "1.0"
    assert [f.message_type for f in fake.frames_received(rec.session_id)].count("input_stream_data") == 1
    assert fake.open_sessions() == 0


def test_merged_output_has_no_exit_code_but_the_marker_prints(fake, ssm):
    # GIVEN separateOutputStream=false and a command carrying the client's marker
    command = f"nvidia-smi -L; {MARKER}"
    result, rec = session(
        fake, ssm, marker_aware(lambda c: NodeReply(b"GPU 0\n", b"err\n", 9)), command, separate=False
    )
    # THEN one merged stream, no ExitCode frame, and the marker line, last, carries the status
    assert result.exit_code is None and result.stderr == b""
    assert result.stdout == b"GPU 0\nerr\n\n__HPD_RC_7f3a9c=9\n"
    assert {ptype for ptype, _ in result.payloads} == {1, 5, 7}
    assert rec.separate_used is False


def test_no_separate_streams_fault_ignores_the_parameter(fake, ssm):
    result, rec = session(fake, ssm, NodeReply(b"out\n", b"err\n", 2), faults=Faults(no_separate_streams=True))
    assert result.stdout == b"out\nerr\n" and result.stderr == b"" and result.exit_code is None
    assert rec.separate_requested is True and rec.separate_used is False


def test_marker_with_separate_streams_reports_printfs_status(fake, ssm):
    # GIVEN an agent that separates streams, and the marker appended to a failing command
    result, _ = session(fake, ssm, marker_aware(lambda c: NodeReply(b"", b"no such file\n", 2)), f"ls /x; {MARKER}")
    # THEN, as on a real node, the ExitCode frame is printf's 0 and the marker carries the body's 2
    assert result.exit_code == 0
    assert result.stdout == b"\n__HPD_RC_7f3a9c=2\n" and result.stderr == b"no such file\n"


def test_wrapper_marker_with_separate_streams_keeps_the_status(fake, ssm):
    result, rec = session(fake, ssm, marker_aware(lambda c: NodeReply(c.encode(), b"", 7)), WRAPPER + "nvidia-smi -L")
    assert result.exit_code == 7
    assert result.stdout == b"nvidia-smi -L\n__HPD_RC_0123abcd=7\n"
    assert rec.command == WRAPPER + "nvidia-smi -L"


def test_old_agent_merges_streams_and_the_marker_still_prints(fake, ssm):
    result, _ = session(
        fake,
        ssm,
        marker_aware(lambda c: NodeReply(b"out\n", b"err\n", 5)),
        f"probe; {MARKER}",
        faults=Faults(no_separate_streams=True),
    )
    assert result.exit_code is None and result.stdout == b"out\nerr\n\n__HPD_RC_7f3a9c=5\n"


def test_sdk_reaches_the_fake_through_aws_endpoint_url_ssm(fake, monkeypatch):
    # GIVEN only the service-specific endpoint variable, as the demo sets it
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", fake.endpoint_url)
    fake.add_node(TARGET, NodeReply(b"hi\n", b"", 0))
    client = boto3.client("ssm", region_name="eu-west-1")
    # WHEN the product's usual client calls StartSession
    started = start(client)
    # THEN it lands on the fake, and the session region comes from the request's signature
    assert fake.session(started["SessionId"]).region == "eu-west-1"
    assert asyncio.run(run_client(started["StreamUrl"], started["TokenValue"])).stdout == b"hi\n"


def test_tiny_chunks_keep_the_output_and_utf8_characters_whole(fake, ssm):
    text = "température 41 °C ✓ 🚀\n".encode() * 20
    result, _ = session(fake, ssm, NodeReply(text, b"e" * 10, 0), faults=Faults(chunk_size=3))
    assert result.stdout == text and result.stderr == b"e" * 10
    stdout_frames = [payload for ptype, payload in result.payloads if ptype == 1]
    assert len(stdout_frames) > len(text) // 4
    assert max(len(p) for p in stdout_frames) <= 4  # a 4-byte emoji goes out whole
    for payload in stdout_frames:  # no character is split across frames
        payload.decode("utf-8")


def test_out_of_order_frames_are_reassembled(fake, ssm):
    body = b"".join(b"line %03d\n" % i for i in range(100))
    result, rec = session(fake, ssm, NodeReply(body, b"", 0), faults=Faults(chunk_size=50, out_of_order=True))
    # THEN the wire order was not ascending, and the client's reordering restored the output
    assert result.arrivals != sorted(result.arrivals)
    assert result.stdout == body and result.exit_code == 0
    assert rec.outcome == "completed"


def test_duplicate_frames_are_dropped_by_the_client(fake, ssm):
    result, _ = session(fake, ssm, NodeReply(b"x" * 5000, b"", 1), faults=Faults(duplicate_frames=True))
    assert result.duplicates >= 5
    assert result.stdout == b"x" * 5000 and result.exit_code == 1


def test_drop_first_ack_needs_a_retransmitting_client(fake, ssm):
    # GIVEN the agent loses the client's first HandshakeResponse
    result, rec = session(
        fake, ssm, NodeReply(b"ok\n", b"", 0), faults=Faults(drop_first_ack=True), retransmit_after=0.3
    )
    # THEN a client that retransmits completes the session
    assert result.stdout == b"ok\n" and result.exit_code == 0 and result.retransmits >= 1
    assert rec.dropped == [0]
    responses = [f for f in fake.frames_received(rec.session_id) if f.payload_type == 6]
    assert len(responses) >= 2 and rec.delivered[0][0] == 6 and len(rec.delivered) == 1


def test_drop_first_ack_stalls_a_client_that_never_retransmits():
    with FakeSsm(start_session_rate=None, handshake_timeout=0.5) as service:
        ssm = ssm_client(service)
        result, rec = session(
            service, ssm, NodeReply(b"ok\n", b"", 0), faults=Faults(drop_first_ack=True), retransmit_after=None
        )
        assert result.stdout == b"" and result.exit_code is None
        assert "Handshake timed out" in result.closed_output
        assert rec.outcome == "handshake_timeout" and rec.status == "Failed"


def test_hung_node_sends_nothing_until_terminate_session(fake, ssm):
    # GIVEN a node that accepts the session and then says nothing
    fake.add_node(TARGET, NodeReply(b"never", b"", 0), faults=Faults(hang=True))
    started = start(ssm)

    async def scenario() -> tuple[list[Any], dict[str, Any]]:
        async with connect(started["StreamUrl"]) as ws:
            opener = {
                "MessageSchemaVersion": "1.0",
                "RequestId": str(uuid.uuid4()),
                "TokenValue": started["TokenValue"],
                "ClientId": "c",
                "ClientVersion": "t",
            }
            await ws.send(json.dumps(opener))
            silent = []
            with pytest.raises(TimeoutError):
                silent.append(await asyncio.wait_for(ws.recv(), 0.8))
            assert fake.open_sessions() == 1
            # WHEN the client gives up and terminates the session
            await asyncio.to_thread(ssm.terminate_session, SessionId=started["SessionId"])
            # THEN the channel is closed by the service
            frame = await asyncio.wait_for(ws.recv(), 5)
            assert isinstance(frame, bytes)  # the service's channel_closed is a binary message
            closed = unpack(frame)
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 5)
            return silent, {"type": closed.mtype, "payload": json.loads(closed.payload)}

    silent, closed = asyncio.run(scenario())
    assert silent == [] and closed["type"] == "channel_closed"
    assert closed["payload"]["SessionId"] == started["SessionId"] and closed["payload"]["DestinationId"] == TARGET
    assert fake.wait_idle(5) and fake.open_sessions() == 0
    rec = fake.session(started["SessionId"])
    assert rec.outcome == "hung" and rec.sent == [] and started["SessionId"] in fake.terminated


def test_kms_required_ends_the_session_when_the_client_refuses(fake, ssm):
    result, rec = session(fake, ssm, NodeReply(b"secret", b"", 0), faults=Faults(kms_required=True))
    actions = result.handshake_request["RequestedClientActions"]
    assert [a["ActionType"] for a in actions] == ["SessionType", "KMSEncryption"]
    assert actions[1]["ActionParameters"]["KMSKeyId"] == fake.kms_key_id
    assert result.stdout == b"" and result.exit_code is None and result.handshake_complete is None
    assert "KMSEncryption failed on client with status 3" in result.closed_output
    assert rec.outcome == "handshake_failed"


def test_kms_required_and_a_client_that_claims_success(fake, ssm):
    def claim_kms(request):
        answer = answer_ok(request)
        answer["ProcessedClientActions"][1].update(ActionStatus=1, ActionResult={"KMSCipherTextKey": "AAAA"})
        return answer

    result, rec = session(
        fake, ssm, NodeReply(b"secret", b"", 0), faults=Faults(kms_required=True), handshake=claim_kms
    )
    assert result.stdout == b"" and "KMS" in result.closed_output and rec.outcome == "handshake_failed"


def test_wrong_token_is_refused(fake, ssm):
    fake.add_node(TARGET, NodeReply(b"x", b"", 0))
    started = start(ssm)
    result = asyncio.run(run_client(started["StreamUrl"], "AAEAAnot-the-token"))
    assert result.handshake_request is None and result.stdout == b""
    assert "Invalid token" in result.closed_output and result.close_code == 1008
    rec = fake.wait_session_done(started["SessionId"])
    assert rec.outcome == "token_rejected" and rec.sent == []


def test_bad_digest_frame_is_replaced_by_its_retransmission(fake, ssm):
    body = b"0123456789" * 30
    # GIVEN the first output frame corrupted on the wire
    # WHEN the client verifies digests
    result, rec = session(fake, ssm, NodeReply(body, b"", 0), faults=Faults(bad_digest=True, chunk_size=100))
    # THEN it drops the corrupt copy and gets the intact retransmission
    assert result.bad_digests == 1 and result.stdout == body
    assert rec.retransmissions >= 1


def test_bad_digest_corrupts_output_for_a_client_that_does_not_verify(fake, ssm):
    body = b"0123456789" * 30
    result, _ = session(
        fake, ssm, NodeReply(body, b"", 0), faults=Faults(bad_digest=True, chunk_size=100), verify_digest=False
    )
    assert result.stdout != body and len(result.stdout) == len(body)


def test_large_output(fake, ssm):
    body = bytes(range(256)) * (2 * 1024 * 1024 // 256)
    result, rec = session(fake, ssm, NodeReply(body, b"tail\n", 0), timeout=60)
    assert result.stdout == body and result.stderr == b"tail\n" and result.exit_code == 0
    assert len(rec.sent) > 2048 and rec.unacked_at_close == 0


def test_client_input_is_acked_reordered_and_deduplicated(fake, ssm):
    # GIVEN a slow command, and a client that sends two more data frames out of order and one twice
    extra = [(2, 1, b"second"), (1, 1, b"first"), (2, 1, b"second")]
    result, rec = session(fake, ssm, NodeReply(b"done\n", b"", 0, delay=0.5), after_handshake=extra)
    # THEN the agent delivered them in sequence order, once each, and acked all of them
    assert rec.delivered[1:] == [(1, b"first"), (1, b"second")]
    assert rec.duplicates_received == 1
    assert result.retransmits == 0 and result.stdout == b"done\n"


def test_responder_failure_ends_the_session_with_an_error(fake, ssm):
    def broken(_command: str) -> NodeReply:
        raise OSError("fork failed")

    result, rec = session(fake, ssm, broken)
    assert "fork failed" in result.closed_output and rec.outcome == "command_error"
    assert result.handshake_complete is not None and result.stdout == b""


def test_upgrade_must_be_signed_when_required():
    with FakeSsm(start_session_rate=None, require_signature=True) as service:
        service.add_node(TARGET, NodeReply(b"signed\n", b"", 0))
        ssm = ssm_client(service)
        # GIVEN an unsigned upgrade
        started = start(ssm)
        with pytest.raises(InvalidStatus) as exc_info:
            asyncio.run(run_client(started["StreamUrl"], started["TokenValue"]))
        assert exc_info.value.response.status_code == 403
        assert "not SigV4-signed" in service.session(started["SessionId"]).rejected_upgrades[0]

        def signed(url: str, service_name: str = "ssmmessages", region: str = REGION) -> dict[str, str]:
            request = AWSRequest(method="GET", url=url.replace("ws://", "http://", 1))
            SigV4Auth(Credentials("x", "x"), service_name, region).add_auth(request)
            return {"Authorization": request.headers["Authorization"], "X-Amz-Date": request.headers["X-Amz-Date"]}

        # AND one signed for the wrong service
        with pytest.raises(InvalidStatus):
            asyncio.run(
                run_client(started["StreamUrl"], started["TokenValue"], headers=signed(started["StreamUrl"], "ssm"))
            )
        # WHEN the upgrade is SigV4-signed for ssmmessages in the session's region
        result = asyncio.run(
            run_client(started["StreamUrl"], started["TokenValue"], headers=signed(started["StreamUrl"]))
        )
        # THEN the session runs
        assert result.stdout == b"signed\n"
        rec = service.wait_session_done(started["SessionId"])
        assert rec.upgrade_headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=x/")
        assert service.internal_errors == []


def test_a_second_connection_to_a_session_is_refused(fake, ssm):
    fake.add_node(TARGET, NodeReply(b"once\n", b"", 0))
    started = start(ssm)
    assert asyncio.run(run_client(started["StreamUrl"], started["TokenValue"])).stdout == b"once\n"
    with pytest.raises(InvalidStatus):
        asyncio.run(run_client(started["StreamUrl"], started["TokenValue"]))


def test_concurrent_sessions_from_many_threads(fake):
    # GIVEN several nodes, each echoing its own command
    targets = [f"sagemaker-cluster:abcdef123456_workers-i-{i:017x}" for i in range(12)]
    for target in targets:
        fake.add_node(target, lambda command: NodeReply(command.encode(), b"", 0, delay=0.1))
    results: dict[str, bytes] = {}
    errors: list[BaseException] = []

    def worker(target: str) -> None:
        try:
            client = ssm_client(fake)
            started = start(client, f"echo {target}", target=target)
            results[target] = asyncio.run(run_client(started["StreamUrl"], started["TokenValue"])).stdout
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    # WHEN they all run at once
    threads = [threading.Thread(target=worker, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    # THEN every session got its own output
    assert errors == []
    assert results == {t: f"echo {t}".encode() for t in targets}
    assert len(fake.started) == len(targets) and fake.wait_idle(5)


def test_stop_closes_everything_and_frees_the_ports():
    before = set(threading.enumerate())
    # GIVEN a running fake with a hung session still open
    service = FakeSsm(start_session_rate=None).start()
    service.add_node(TARGET, NodeReply(), faults=Faults(hang=True))
    started = start(ssm_client(service))
    api_port, ws_port = int(service.endpoint_url.rsplit(":", 1)[1]), service.ws_port
    closed = threading.Event()

    async def hold_open() -> None:
        async with connect(started["StreamUrl"]) as ws:
            await ws.send(
                json.dumps(
                    {
                        "MessageSchemaVersion": "1.0",
                        "RequestId": "r",
                        "TokenValue": started["TokenValue"],
                        "ClientId": "c",
                        "ClientVersion": "t",
                    }
                )
            )
            with pytest.raises(ConnectionClosed):
                while True:
                    await ws.recv()
        closed.set()

    holder = threading.Thread(target=asyncio.run, args=(hold_open(),))
    holder.start()
    deadline = time.monotonic() + 5
    while service.open_sessions() == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert service.open_sessions() == 1
    # WHEN it stops
    service.stop()
    holder.join(10)
    # THEN the open channel is closed, no thread is left and both ports are free (the time: bench/)
    assert closed.is_set()
    assert set(threading.enumerate()) - before == set()
    for port in (api_port, ws_port):
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
    service.stop()  # idempotent
