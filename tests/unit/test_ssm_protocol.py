"""The Session Manager data-channel codec, and the pure helpers of the session client."""

from __future__ import annotations

import hashlib
import json
import shlex
import struct
import uuid

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from hyperpod_debugger.aws import ssm_protocol as proto
from hyperpod_debugger.aws.ssm_session import (
    _Output,
    _preview,
    is_presigned,
    marker_pattern,
    sigv4_headers,
    wrap_command,
)
from tests.ssm_agent_side import (
    channel_closed_payload,
    exit_code_payload,
    handshake_complete_payload,
    handshake_request_payload,
    parse_handshake_response,
)

FIXED_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def hand_built(
    message_type: str,
    *,
    schema: int = 1,
    created: int = 1_700_000_000_123,
    seq: int = 0,
    flags: int = 0,
    mid: uuid.UUID = FIXED_ID,
    payload_type: int = 0,
    payload: bytes = b"",
    digest: bytes | None = None,
    payload_length: int | None = None,
    header_length: int = 116,
) -> bytes:
    """A frame assembled field by field from the documented layout, independent of the codec."""
    out = bytearray()
    out += header_length.to_bytes(4, "big")
    out += message_type.encode().ljust(32, b" ")
    out += schema.to_bytes(4, "big")
    out += created.to_bytes(8, "big")
    out += seq.to_bytes(8, "big", signed=True)
    out += flags.to_bytes(8, "big")
    out += mid.bytes[8:16] + mid.bytes[0:8]
    out += digest if digest is not None else hashlib.sha256(payload).digest()
    out += payload_type.to_bytes(4, "big")
    out += (len(payload) if payload_length is None else payload_length).to_bytes(4, "big")
    out += payload
    return bytes(out)


# --------------------------------------------------------------------------- layout


def test_golden_bytes_of_an_output_frame():
    message = proto.ClientMessage(
        message_type="output_stream_data",
        sequence_number=7,
        flags=0,
        payload_type=1,
        payload=b"hello\n",
        message_id=FIXED_ID,
        created_date=1_700_000_000_123,
    )
    frame = proto.encode_message(message)
    assert frame == hand_built("output_stream_data", seq=7, payload_type=1, payload=b"hello\n")
    assert len(frame) == 120 + 6
    # field by field, at the documented offsets
    assert frame[0:4] == b"\x00\x00\x00\x74"  # 116
    assert frame[4:36] == b"output_stream_data" + b" " * 14
    assert frame[36:40] == b"\x00\x00\x00\x01"
    assert int.from_bytes(frame[40:48], "big") == 1_700_000_000_123
    assert frame[48:56] == b"\x00" * 7 + b"\x07"
    assert frame[56:64] == b"\x00" * 8
    assert frame[64:80] == bytes.fromhex("8899aabbccddeeff0011223344556677")
    assert frame[80:112] == hashlib.sha256(b"hello\n").digest()
    assert frame[112:116] == b"\x00\x00\x00\x01"
    assert frame[116:120] == b"\x00\x00\x00\x06"
    assert frame[120:] == b"hello\n"


def test_golden_bytes_decode_to_the_fields():
    raw = hand_built("input_stream_data", schema=1, seq=3, flags=2, payload_type=6, payload=b'{"a":1}')
    message = proto.decode_message(raw)
    assert message == proto.ClientMessage(
        message_type="input_stream_data",
        sequence_number=3,
        flags=2,
        payload_type=6,
        payload=b'{"a":1}',
        message_id=FIXED_ID,
        created_date=1_700_000_000_123,
        schema_version=1,
    )


def test_uuid_wire_layout_is_low_half_first():
    assert proto.uuid_to_wire(FIXED_ID) == bytes.fromhex("8899aabbccddeeff0011223344556677")
    assert proto.uuid_from_wire(bytes.fromhex("8899aabbccddeeff0011223344556677")) == FIXED_ID
    for _ in range(20):
        value = uuid.uuid4()
        assert proto.uuid_from_wire(proto.uuid_to_wire(value)) == value
    with pytest.raises(proto.ProtocolError):
        proto.uuid_from_wire(b"\x00" * 15)


@pytest.mark.parametrize(
    "message",
    [
        proto.ClientMessage("acknowledge", 0, 3, 0, b'{"x":1}'),
        proto.ClientMessage("output_stream_data", 0, proto.FLAG_SYN, 5, b"{}"),
        proto.ClientMessage("output_stream_data", 2**40, 0, 11, bytes(range(256)) * 8),
        proto.ClientMessage("channel_closed", 0, 0, 0, b""),
        proto.ClientMessage("input_stream_data", -1, 0, 6, "ünïcode ✓".encode()),
        proto.ClientMessage("a" * 32, 1, 0, 0, b"x"),
    ],
)
def test_round_trip(message):
    assert proto.decode_message(proto.encode_message(message)) == message


def test_data_message_sets_syn_on_the_first_frame_only():
    first = proto.data_message(proto.INPUT_STREAM_DATA, 0, proto.PayloadType.HANDSHAKE_RESPONSE, b"{}")
    later = proto.data_message(proto.INPUT_STREAM_DATA, 1, proto.PayloadType.OUTPUT, b"x")
    assert first.flags == proto.FLAG_SYN and later.flags == 0
    assert first.payload_type == 6 and first.message_type == "input_stream_data"


def test_encode_rejects_bad_fields():
    with pytest.raises(ValueError, match="message type"):
        proto.encode_message(proto.ClientMessage("x" * 33))
    with pytest.raises(ValueError, match="message type"):
        proto.encode_message(proto.ClientMessage(""))
    with pytest.raises(ValueError, match="out of range"):
        proto.encode_message(proto.ClientMessage("acknowledge", payload_type=2**32))


# --------------------------------------------------------------------------- damaged frames


def test_bad_digest_is_a_protocol_error():
    raw = hand_built("output_stream_data", payload_type=1, payload=b"data", digest=b"\x00" * 32)
    with pytest.raises(proto.ProtocolError, match="digest"):
        proto.decode_message(raw)
    assert proto.decode_message(raw, verify_digest=False).payload == b"data"


def test_flipped_payload_byte_is_caught_by_the_digest():
    raw = bytearray(proto.encode_message(proto.ClientMessage("output_stream_data", payload_type=1, payload=b"abcdef")))
    raw[-1] ^= 0x01
    with pytest.raises(proto.ProtocolError, match="digest mismatch in output_stream_data"):
        proto.decode_message(bytes(raw))


def test_empty_payload_and_publication_messages_skip_the_digest_check():
    # senders leave the digest of an empty payload, and of start/pause_publication, unchecked
    assert proto.decode_message(hand_built("acknowledge", digest=b"\x00" * 32)).payload == b""
    paused = proto.decode_message(hand_built("pause_publication", payload=b"{}", digest=b"\x01" * 32))
    assert paused.message_type == "pause_publication"


@pytest.mark.parametrize("cut", [0, 1, 4, 36, 80, 119])
def test_truncated_header(cut):
    raw = hand_built("output_stream_data", payload_type=1, payload=b"abc")
    with pytest.raises(proto.ProtocolError, match="truncated frame"):
        proto.decode_message(raw[:cut])


def test_truncated_payload():
    raw = hand_built("output_stream_data", payload_type=1, payload=b"abcdef")
    with pytest.raises(proto.ProtocolError, match="declares a 6-byte payload, 3 present"):
        proto.decode_message(raw[:-3])


def test_trailing_bytes_are_rejected():
    raw = hand_built("output_stream_data", payload_type=1, payload=b"abc")
    with pytest.raises(proto.ProtocolError, match="after the declared"):
        proto.decode_message(raw + b"zz")


def test_wrong_header_length_and_empty_type():
    with pytest.raises(proto.ProtocolError, match="header length"):
        proto.decode_message(hand_built("output_stream_data", header_length=112))
    with pytest.raises(proto.ProtocolError, match="empty message type"):
        proto.decode_message(hand_built(""))


def test_message_type_padding_may_be_nul_or_space():
    raw = bytearray(hand_built("acknowledge"))
    raw[4 + len("acknowledge") : 36] = b"\x00" * (32 - len("acknowledge"))
    assert proto.decode_message(bytes(raw)).message_type == "acknowledge"


# --------------------------------------------------------------------------- payloads


def test_acknowledge_message_for_a_data_frame():
    received = proto.ClientMessage("output_stream_data", 42, 0, 1, b"x", message_id=FIXED_ID)
    ack = proto.acknowledge_message(received)
    assert (ack.message_type, ack.sequence_number, ack.flags, ack.payload_type) == ("acknowledge", 0, 3, 0)
    assert json.loads(ack.payload) == {
        "AcknowledgedMessageType": "output_stream_data",
        "AcknowledgedMessageId": "00112233-4455-6677-8899-aabbccddeeff",
        "AcknowledgedMessageSequenceNumber": 42,
        "IsSequentialMessage": True,
    }
    parsed = proto.parse_acknowledgement(ack.payload)
    assert parsed == proto.Acknowledgement("output_stream_data", str(FIXED_ID), 42, True)


@pytest.mark.parametrize("payload", [b"", b"[]", b"not json", b'{"AcknowledgedMessageSequenceNumber": "1"}'])
def test_bad_acknowledgements(payload):
    with pytest.raises(proto.ProtocolError):
        proto.parse_acknowledgement(payload)


def test_handshake_request_with_kms():
    payload = handshake_request_payload(
        "3.3.1142.0",
        [
            ("SessionType", {"SessionType": "NonInteractiveCommands", "Properties": None}),
            ("KMSEncryption", {"KMSKeyId": "arn:aws:kms:us-west-2:111122223333:key/k"}),
        ],
    )
    request = proto.parse_handshake_request(payload)
    assert request.agent_version == "3.3.1142.0"
    assert request.session_type == "NonInteractiveCommands"
    assert [a.action_type for a in request.actions] == ["SessionType", "KMSEncryption"]
    assert request.action("KMSEncryption").parameters == {"KMSKeyId": "arn:aws:kms:us-west-2:111122223333:key/k"}
    assert request.action("Other") is None


@pytest.mark.parametrize(
    "payload",
    [b"nope", b"[1]", b'{"RequestedClientActions": {}}', b'{"RequestedClientActions": [{"ActionType": 5}]}'],
)
def test_malformed_handshake_request(payload):
    with pytest.raises(proto.ProtocolError):
        proto.parse_handshake_request(payload)


def test_handshake_response_field_names():
    payload = proto.handshake_response_payload(
        "1.2.312.0",
        [
            proto.ProcessedAction("SessionType", proto.ActionStatus.SUCCESS),
            proto.ProcessedAction("KMSEncryption", proto.ActionStatus.UNSUPPORTED, None, "not supported"),
        ],
        ["not supported"],
    )
    assert json.loads(payload) == {
        "ClientVersion": "1.2.312.0",
        "ProcessedClientActions": [
            {"ActionType": "SessionType", "ActionStatus": 1, "ActionResult": None, "Error": ""},
            {"ActionType": "KMSEncryption", "ActionStatus": 3, "ActionResult": None, "Error": "not supported"},
        ],
        "Errors": ["not supported"],
    }
    version, actions, errors = parse_handshake_response(payload)
    assert version == "1.2.312.0" and errors == ["not supported"]
    assert [(a.action_type, a.status) for a in actions] == [
        ("SessionType", proto.ActionStatus.SUCCESS),
        ("KMSEncryption", proto.ActionStatus.UNSUPPORTED),
    ]


def test_handshake_complete():
    payload = handshake_complete_payload(1_500_000_000, "hello")
    assert json.loads(payload) == {"HandshakeTimeToComplete": 1_500_000_000, "CustomerMessage": "hello"}
    assert proto.parse_handshake_complete(payload) == proto.HandshakeComplete(1_500_000_000, "hello")
    assert proto.parse_handshake_complete(b"{}") == proto.HandshakeComplete(0, "")


def test_channel_closed():
    payload = channel_closed_payload("sess-1", "Session is terminated")
    assert json.loads(payload)["MessageType"] == "channel_closed"
    closed = proto.parse_channel_closed(payload)
    assert (closed.output, closed.session_id) == ("Session is terminated", "sess-1")
    assert proto.parse_channel_closed(b"").output == ""
    assert proto.parse_channel_closed(b"plain text").output == "plain text"


@pytest.mark.parametrize(("payload", "code"), [(b"EXIT_CODE: 0", 0), (b"EXIT_CODE: 3", 3), (b"EXIT_CODE: -1\n", -1)])
def test_exit_code(payload, code):
    assert proto.parse_exit_code(payload) == code
    assert proto.parse_exit_code(exit_code_payload(code)) == code


@pytest.mark.parametrize("payload", [b"", b"EXIT: 1", b"EXIT_CODE: x", b"3"])
def test_bad_exit_code(payload):
    with pytest.raises(proto.ProtocolError):
        proto.parse_exit_code(payload)


def test_open_data_channel_text():
    text = proto.open_data_channel_text("tok", client_id="cid", client_version="1.2.312.0", request_id="rid")
    assert json.loads(text) == {
        "MessageSchemaVersion": "1.0",
        "RequestId": "rid",
        "TokenValue": "tok",
        "ClientId": "cid",
        "ClientVersion": "1.2.312.0",
    }


def test_header_struct_matches_the_offsets():
    assert proto.PAYLOAD_OFFSET == 120
    assert struct.calcsize(">I32sIQqQ16s32sII") == 120


# --------------------------------------------------------------------------- session helpers (pure)

NONCE = "0123456789abcdef"


@pytest.mark.parametrize(
    "command",
    ["bash -c 'echo QUJD | base64 -d | gunzip -c | bash'", "true", "bash -c 'echo a; exit 3'", 'echo "it\'s" sh -c x'],
)
def test_wrapped_command_splits_into_sh_and_the_original_words(command):
    wire = wrap_command(command, NONCE)
    assert wire.endswith(" sh " + command)  # the caller's text travels verbatim
    argv = shlex.split(wire)
    assert argv[:2] == ["sh", "-c"] and argv[3] == "sh"
    assert argv[4:] == shlex.split(command)
    assert "__HPD_RC_" + NONCE in argv[2] and "'" not in argv[2]
    assert "\n" not in wire


def test_wrap_command_rejects_a_bad_nonce():
    with pytest.raises(ValueError):
        wrap_command("true", "not-hex'")


def _marker(code: int) -> bytes:
    return f"\n__HPD_RC_{NONCE}={code}\n".encode()


def test_output_strips_the_marker_split_across_frames():
    out = _Output(1024, marker_pattern(NONCE))
    stream = b"line one\nline two" + _marker(7)
    for i in range(0, len(stream), 5):
        out.add_stdout(stream[i : i + 5])
    out.add_stderr(b"warn\n")
    assert out.marker_status == 7
    assert out.finish() == (b"line one\nline two", b"warn\n", False)


def test_output_ignores_a_marker_with_another_nonce():
    out = _Output(1024, marker_pattern(NONCE))
    out.add_stdout(b"x\n__HPD_RC_ffffffffffffffff=0\n")
    assert out.marker_status is None
    assert out.finish()[0] == b"x\n__HPD_RC_ffffffffffffffff=0\n"


def test_output_budget_is_shared_and_the_marker_survives_truncation():
    out = _Output(10, marker_pattern(NONCE))
    out.add_stderr(b"eeee")
    out.add_stdout(b"0123456789")
    out.add_stdout(_marker(0))
    stdout, stderr, truncated = out.finish()
    assert (stdout, stderr, truncated) == (b"012345", b"eeee", True)
    assert out.marker_status == 0


def test_output_partial_marker_inside_the_budget_is_removed():
    out = _Output(8, marker_pattern(NONCE))
    out.add_stdout(b"abcde" + _marker(1))
    assert out.finish() == (b"abcde", b"", False)  # only marker bytes were dropped: nothing real was lost


def test_preview_never_shows_the_whole_command():
    command = "bash -c 'echo " + "A" * 500 + "'"
    shown = _preview(command)
    assert command not in shown and "(" + str(len(command)) + " chars)" in shown


def test_sigv4_headers_sign_the_https_form():
    creds = Credentials("AKIDEXAMPLE", "secret", "session-token")
    url = "wss://ssmmessages.us-west-2.amazonaws.com/v1/data-channel/sess-1?role=publish_subscribe&cell-number=AAA"
    headers = sigv4_headers(url, creds, "us-west-2")
    assert set(headers) == {"X-Amz-Date", "X-Amz-Security-Token", "Authorization"}
    date = headers["X-Amz-Date"]
    assert headers["Authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{date[:8]}/us-west-2/ssmmessages/aws4_request, "
        "SignedHeaders=host;x-amz-date;x-amz-security-token, Signature="
    )
    # recompute independently over the https URL with the same timestamp
    request = AWSRequest(
        method="GET",
        url=url.replace("wss://", "https://"),
        headers={"X-Amz-Date": date, "X-Amz-Security-Token": "session-token"},
    )
    request.context["timestamp"] = date
    signer = SigV4Auth(creds.get_frozen_credentials(), "ssmmessages", "us-west-2")
    signature = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    assert headers["Authorization"].endswith("Signature=" + signature)


def test_presigned_urls_are_recognised():
    assert is_presigned("wss://h/v1/data-channel/s?X-Amz-Signature=abc&X-Amz-Date=1")
    assert not is_presigned("wss://h/v1/data-channel/s?role=publish_subscribe")
