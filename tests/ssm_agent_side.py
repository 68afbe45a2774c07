"""The SSM agent's and the service's side of the Session Manager data channel, for tests.

The product is only ever the client (:mod:`hyperpod_debugger.aws.ssm_protocol`): it parses what the
agent and the service send and builds what a client answers. The tests play the other side with
these builders, and read the client's handshake response back with :func:`parse_handshake_response`.
Field names follow aws/amazon-ssm-agent (``agent/session/contracts/model.go``).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from hyperpod_debugger.aws import ssm_protocol as proto


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def handshake_request_payload(agent_version: str, actions: list[tuple[str, Any]]) -> bytes:
    """What an agent sends to open the handshake: its version and the actions it asks of the client."""
    return _dumps(
        {
            "AgentVersion": agent_version,
            "RequestedClientActions": [{"ActionType": t, "ActionParameters": p} for t, p in actions],
        }
    )


def parse_handshake_response(payload: bytes) -> tuple[str, list[proto.ProcessedAction], list[str]]:
    """(client version, processed actions, errors) of the client's handshake response, read the way
    the agent reads it; a missing field or an unknown ``ActionStatus`` raises."""
    obj = json.loads(payload.decode("utf-8"))
    actions = [
        proto.ProcessedAction(
            raw["ActionType"], proto.ActionStatus(raw["ActionStatus"]), raw["ActionResult"], raw["Error"]
        )
        for raw in obj["ProcessedClientActions"]
    ]
    return obj["ClientVersion"], actions, list(obj["Errors"])


def handshake_complete_payload(time_to_complete_ns: int, customer_message: str = "") -> bytes:
    """What an agent sends when the handshake is done."""
    return _dumps({"HandshakeTimeToComplete": time_to_complete_ns, "CustomerMessage": customer_message})


def channel_closed_payload(session_id: str, output: str = "") -> bytes:
    """What the service sends when it closes the data channel."""
    return _dumps(
        {
            "MessageId": str(uuid.uuid4()),
            "CreatedDate": str(proto.now_ms()),
            "DestinationId": "",
            "SessionId": session_id,
            "MessageType": proto.CHANNEL_CLOSED,
            "SchemaVersion": proto.SCHEMA_VERSION,
            "Output": output,
        }
    )


def exit_code_payload(code: int) -> bytes:
    """The agent's ExitCode payload once the command has ended."""
    return f"EXIT_CODE: {code}".encode()
