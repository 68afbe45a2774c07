"""HMA detections from a CloudWatch Logs subscription: payload decoding, validation and per-node signals."""

from __future__ import annotations

import base64
import copy
import gzip
import json
import pathlib

import pytest

from functions.monitor import hma_logs
from functions.monitor.hma_logs import LogPayloadError, decode_subscription, read_subscription, signals_from_payload

EVENTS = pathlib.Path(__file__).resolve().parents[1] / "events"
REGION = "us-west-2"
GROUP = "/aws/sagemaker/Clusters/sample-cluster/lw12e0dn1hhd"
ARN = "arn:aws:sagemaker:us-west-2:111122223333:cluster/lw12e0dn1hhd"
NODE_A = "i-0391f86fa0fe0d465"
NODE_B = "i-0aa11bb22cc33dd44"


def sample() -> dict:
    """The recorded decoded payload (tests/events/hma_log_subscription.json)."""
    return json.loads((EVENTS / "hma_log_subscription.json").read_text())


def wrap(document: object) -> dict:
    """What Lambda receives: the JSON gzip-compressed and base64-encoded under awslogs.data."""
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    return {"awslogs": {"data": base64.b64encode(gzip.compress(raw)).decode()}}


def slurm_record(xid: int) -> str:
    """Slurm HMA writes the literal keys ``"condition: "`` and ``"data: "``."""
    return json.dumps(
        {
            "level": "info",
            "ts": "2026-06-01T17:20:25Z",
            "msg": "DCGM Policy Violation found ",
            "condition: ": "XID Error",
            "data: ": {"ErrNum": xid},
            "HealthMonitoringAgentDetectionEvent": "HealthEvent",
        }
    )


def eks_record(xid: int) -> str:
    kernel = f"NVRM: Xid (PCI:0000:b9:00): {xid}, pid=<unknown>, name=<unknown>"
    return json.dumps(
        {
            "level": "info",
            "msg": "NPD caught event: %v",
            "details": {
                "reason": "XidHardwareFailure",
                "message": f'Node condition NvidiaErrorReboot is now: True, reason: XidHardwareFailure, message: "{kernel}"',
            },
            "HealthMonitoringAgentDetectionEvent": "HealthEvent",
        }
    )


def payload(stream: str, messages: list[str], *, group: str = GROUP, first_id: int = 1000) -> dict:
    return {
        "messageType": "DATA_MESSAGE",
        "owner": "111122223333",
        "logGroup": group,
        "logStream": stream,
        "subscriptionFilters": ["hma"],
        "logEvents": [
            {"id": str(first_id + n), "timestamp": 1780334425000 + n, "message": m} for n, m in enumerate(messages)
        ],
    }


def hma_stream(node: str, group: str = "worker-group-1") -> str:
    return f"SagemakerHealthMonitoringAgent/{group}/{node}"


def read(document: dict, **kwargs) -> hma_logs.HmaBatch:
    batch = read_subscription(wrap(document), region=REGION, **kwargs)
    assert batch is not None
    return batch


# --------------------------------------------------------------------------- decoding


def test_the_recorded_payload_decodes_into_one_signal_for_its_node():
    # GIVEN the recorded delivery: one Slurm Xid 79 detection and one agent status line
    # WHEN it is read
    batch = read(sample())

    # THEN the cluster comes from the log group, the ARN from the owner and the Region, and only
    # the detection counts
    assert batch.cluster == hma_logs.ClusterLogGroup(GROUP, "sample-cluster", "lw12e0dn1hhd")
    assert batch.cluster_arn == ARN
    assert batch.detections == 1
    [signal] = batch.signals
    assert signal.node == NODE_A
    assert signal.cluster_arn == ARN and signal.region == REGION
    assert signal.reason == "HMA: Xid 79 (GPU has fallen off the bus)"
    assert batch.dropped is None


def test_decoded_fields_are_kept():
    decoded = decode_subscription(wrap(sample()))
    assert decoded.message_type == "DATA_MESSAGE" and not decoded.is_control
    assert decoded.owner == "111122223333"
    assert decoded.log_stream == hma_stream(NODE_A)
    assert [e.id for e in decoded.events] == [e["id"] for e in sample()["logEvents"]]
    assert decoded.events[0].timestamp == 1780334425000


def test_a_control_message_is_ignored():
    # GIVEN the connectivity check CloudWatch Logs sends when a filter is created
    control = {
        "messageType": "CONTROL_MESSAGE",
        "owner": "CloudwatchLogs",
        "logGroup": "",
        "logStream": "",
        "subscriptionFilters": [],
        "logEvents": [
            {"id": "", "timestamp": 1780334425000, "message": "CWL CONTROL MESSAGE: Checking health of destination"}
        ],
    }
    # WHEN / THEN it decodes as a control message and yields nothing
    assert decode_subscription(wrap(control)).is_control
    assert read_subscription(wrap(control), region=REGION) is None


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({}, "no awslogs.data"),
        ({"awslogs": {}}, "no awslogs.data"),
        ({"awslogs": {"data": 42}}, "no awslogs.data"),
        ("not an event", "no awslogs.data"),
        (None, "no awslogs.data"),
        ({"awslogs": {"data": "H4sI@@@not-base64"}}, "not valid base64"),
        ({"awslogs": {"data": base64.b64encode(b"plain text, not gzip").decode()}}, "not gzip"),
        ({"awslogs": {"data": base64.b64encode(gzip.compress(b"<xml>no</xml>")).decode()}}, "UTF-8 JSON"),
        ({"awslogs": {"data": base64.b64encode(gzip.compress(b"\xff\xfe\x00")).decode()}}, "UTF-8 JSON"),
        ({"awslogs": {"data": base64.b64encode(gzip.compress(b"[1, 2]")).decode()}}, "not hold a JSON object"),
    ],
)
def test_unreadable_payloads_raise_one_typed_error(event, message):
    with pytest.raises(LogPayloadError, match=message):
        read_subscription(event, region=REGION)


def test_truncated_base64_is_rejected():
    data = wrap(sample())["awslogs"]["data"]
    # a cut that breaks the padding, and a cut on a 4-character boundary (valid base64, short gzip)
    with pytest.raises(LogPayloadError, match="base64"):
        decode_subscription({"awslogs": {"data": data[:-3]}})
    with pytest.raises(LogPayloadError, match="truncated gzip|not valid gzip"):
        decode_subscription({"awslogs": {"data": data[: (len(data) // 2) // 4 * 4]}})


def test_a_payload_that_inflates_past_the_limit_is_rejected(monkeypatch):
    monkeypatch.setattr(hma_logs, "MAX_DECODED_BYTES", 1024)
    big = payload(hma_stream(NODE_A), ["x" * 4096])
    with pytest.raises(LogPayloadError, match="inflates past 1024 bytes"):
        decode_subscription(wrap(big))


@pytest.mark.parametrize("field", ["logGroup", "logStream", "owner", "logEvents"])
def test_a_data_message_without_a_required_field_names_it(field):
    document = sample()
    del document[field]
    with pytest.raises(LogPayloadError, match=f"missing or invalid fields: {field}"):
        read_subscription(wrap(document), region=REGION)


def test_a_log_event_of_the_wrong_type_names_the_field_and_the_others_are_still_read():
    # GIVEN the recorded delivery whose second (status) event's message is not a string
    document = sample()
    document["logEvents"][1]["message"] = {"not": "a string"}
    # WHEN it is read
    batch = read(document)
    # THEN that event is reported with where and why, and the detection of the first still becomes a signal
    [bad] = batch.bad_events
    assert bad.index == 1 and bad.id == document["logEvents"][1]["id"]
    assert bad.reason.startswith("logEvents.1.message: Input should be a valid string")
    [signal] = batch.signals
    assert signal.node == NODE_A and batch.detections == 1


def test_an_unknown_message_type_is_rejected():
    document = sample() | {"messageType": "SOMETHING_ELSE"}
    with pytest.raises(LogPayloadError, match="unknown messageType 'SOMETHING_ELSE'"):
        read_subscription(wrap(document), region=REGION)


@pytest.mark.parametrize(
    "group",
    [
        "/aws/lambda/my-function",
        "/aws/sagemaker/Clusters/sample-cluster",
        "/aws/sagemaker/Clusters/sample-cluster/lw12e0dn1hhd/extra",
        "/aws/sagemaker/Clusters/sample-cluster/LW12E0DN1HHD",
        "/aws/sagemaker/Clusters/sample-cluster/short",
        "/aws/sagemaker/Clusters/-leading-dash/lw12e0dn1hhd",
        "/aws/sagemaker/Clusters/sample_cluster/lw12e0dn1hhd",
        "/aws/sagemaker/Clusters/" + "a" * 64 + "/lw12e0dn1hhd",
        "/aws/sagemaker/Clusters/sample-cluster/lw12e0dn1hhd\n",
        "",
    ],
)
def test_a_log_group_of_the_wrong_shape_is_rejected_with_the_expected_shape(group):
    with pytest.raises(LogPayloadError, match=r"not a HyperPod cluster log group \(/aws/sagemaker/Clusters/"):
        read(payload(hma_stream(NODE_A), [slurm_record(79)], group=group))


def test_a_63_character_cluster_name_is_accepted():
    name = "a" + "-b" * 31
    assert len(name) == 63
    batch = read(payload(hma_stream(NODE_A), [slurm_record(79)], group=f"/aws/sagemaker/Clusters/{name}/abc123def456"))
    assert batch.cluster.name == name and batch.cluster_arn.endswith(":cluster/abc123def456")


def test_an_owner_that_is_not_an_account_id_is_rejected():
    document = payload(hma_stream(NODE_A), [slurm_record(79)]) | {"owner": "123:456"}
    with pytest.raises(LogPayloadError, match="not a 12-digit account id"):
        read(document)


def test_error_messages_quote_hostile_values_in_ascii():
    group = "/aws/sagemaker/Clusters/\x1b[31mred\n" + "x" * 500
    with pytest.raises(LogPayloadError) as raised:
        read(payload(hma_stream(NODE_A), [slurm_record(79)], group=group))
    text = str(raised.value)
    assert "\x1b" not in text and "\n" not in text and len(text) < 300


# --------------------------------------------------------------------------- partition and ARN


@pytest.mark.parametrize(
    ("function_arn", "partition"),
    [
        ("arn:aws:lambda:us-west-2:111122223333:function:hma", "aws"),
        ("arn:aws-cn:lambda:cn-north-1:111122223333:function:hma", "aws-cn"),
        ("arn:aws-us-gov:lambda:us-gov-west-1:111122223333:function:hma", "aws-us-gov"),
        ("", "aws"),
        (None, "aws"),
        ("arn:evil partition:lambda", "aws"),
    ],
)
def test_partition_comes_from_the_function_arn(function_arn, partition):
    assert hma_logs.partition_of(function_arn) == partition


def test_the_cluster_arn_uses_partition_region_and_owner():
    batch = read_subscription(wrap(sample()), region="cn-north-1", partition="aws-cn")
    assert batch is not None
    assert batch.cluster_arn == "arn:aws-cn:sagemaker:cn-north-1:111122223333:cluster/lw12e0dn1hhd"
    assert batch.signals[0].region == "cn-north-1"


def test_a_region_that_cannot_be_in_an_arn_is_rejected():
    with pytest.raises(LogPayloadError, match="cannot build a cluster ARN"):
        read_subscription(wrap(sample()), region="us-west-2:evil")


# --------------------------------------------------------------------------- streams and detections


def test_only_hma_streams_count():
    # GIVEN deliveries from several streams of one cluster's log group (one stream per delivery),
    # every message carrying the marker (a pattern matches text, not stream names)
    lifecycle = f"LifecycleConfig/worker-group-1/{NODE_A}"
    look_alike = "SagemakerHealthMonitoringAgentBackup/worker-group-1/i-0123456789abcdef0"
    deliveries = {
        hma_stream(NODE_A): [slurm_record(79)],
        hma_stream(NODE_B, "controller-machine"): [slurm_record(48)],
        lifecycle: ["+ grep HealthMonitoringAgentDetectionEvent /var/log/x", slurm_record(79)],
        look_alike: [slurm_record(79)],
    }
    # WHEN each is read
    batches = {stream: read(payload(stream, messages)) for stream, messages in deliveries.items()}

    # THEN the HMA streams give one signal each, and the lifecycle / look-alike streams none
    assert [s.node for s in batches[hma_stream(NODE_A)].signals] == [NODE_A]
    assert [s.node for s in batches[hma_stream(NODE_B, "controller-machine")].signals] == [NODE_B]
    assert batches[hma_stream(NODE_B, "controller-machine")].signals[0].reason.startswith("HMA: Xid 48 (")
    for stream in (lifecycle, look_alike):
        batch = batches[stream]
        assert batch.signals == () and "is not an HMA stream" in (batch.dropped or "")


def test_a_payload_without_detections_gives_no_signal():
    messages = [
        json.dumps({"level": "info", "msg": "GPU health check loop completed"}),
        "agent started",
        "   ",
    ]
    batch = read(payload(hma_stream(NODE_A), messages))
    assert batch.signals == () and batch.detections == 0
    assert batch.dropped == "no detection records"


def test_several_detections_of_one_node_are_one_signal_with_every_code_named_once():
    messages = [slurm_record(79), slurm_record(79), eks_record(48), "plain status line"]
    batch = read(payload(hma_stream(NODE_A), messages))
    [signal] = batch.signals
    assert batch.detections == 3
    assert signal.reason == "HMA: Xid 79 (GPU has fallen off the bus), Xid 48 (uncorrectable double-bit ECC error)"


def test_many_codes_are_summarised():
    batch = read(payload(hma_stream(NODE_A), [slurm_record(x) for x in (79, 48, 63, 64, 74, 94)]))
    assert batch.signals[0].reason.endswith(" and 2 more")


def test_the_slurm_data_quirk_is_read():
    # the Slurm agent writes "data: " / "condition: " (with the colon and blank) as keys
    [signal] = read(payload(hma_stream(NODE_A), [slurm_record(64)])).signals
    assert signal.reason == "HMA: Xid 64 (memory row remapping / page retirement failure)"


def test_a_detection_without_an_xid_uses_the_agents_condition_and_reason():
    record = json.dumps(
        {
            "msg": "NPD caught event",
            "details": {"reason": "EFAUnhealthy", "message": "Node condition NetworkErrorReboot is now: True"},
            "HealthMonitoringAgentDetectionEvent": "HealthEvent",
        }
    )
    [signal] = read(payload(hma_stream(NODE_A), [record])).signals
    assert signal.reason == "HMA: NetworkErrorReboot / EFAUnhealthy"


def test_a_bare_marker_line_is_still_a_detection():
    [signal] = read(payload(hma_stream(NODE_A), ["HealthMonitoringAgentDetectionEvent something odd"])).signals
    assert signal.reason == "HMA: 1 detection record(s) without an Xid or condition"


# --------------------------------------------------------------------------- event ids


def test_event_ids_are_deterministic_per_payload_and_node():
    document = payload(hma_stream(NODE_A), [slurm_record(79), slurm_record(48)])
    first = read(document).signals[0].event_id
    # the same delivery again (a Lambda retry) and with the events in another order
    again = read(copy.deepcopy(document)).signals[0].event_id
    reordered = copy.deepcopy(document)
    reordered["logEvents"].reverse()
    assert first == again == read(reordered).signals[0].event_id
    assert first.startswith("hma-") and len(first) == 44

    # another delivery (other log event ids), another stream or another group: another id
    later = payload(hma_stream(NODE_A), [slurm_record(79), slurm_record(48)], first_id=2000)
    other_group = payload(
        hma_stream(NODE_A), [slurm_record(79), slurm_record(48)], group="/aws/sagemaker/Clusters/other/lw12e0dn1hhd"
    )
    other_stream = payload(hma_stream(NODE_A, "worker-group-2"), [slurm_record(79), slurm_record(48)])
    ids = {first, *(read(d).signals[0].event_id for d in (later, other_group, other_stream))}
    assert len(ids) == 4


def test_only_detection_records_feed_the_event_id():
    with_noise = payload(hma_stream(NODE_A), [slurm_record(79), "agent heartbeat"])
    without = payload(hma_stream(NODE_A), [slurm_record(79)])
    assert read(with_noise).signals[0].event_id == read(without).signals[0].event_id


# --------------------------------------------------------------------------- hostile names and messages


@pytest.mark.parametrize(
    ("stream", "node"),
    [
        (f"SagemakerHealthMonitoringAgent/group/with/slashes/{NODE_A}", NODE_A),
        (f"SagemakerHealthMonitoringAgent/../../{NODE_A}", NODE_A),
        (f"SagemakerHealthMonitoringAgent/grüppe-☃/{NODE_A}", NODE_A),
        # a trailing newline is not part of the id: the clean id is found, never "i-…\n"
        (f"SagemakerHealthMonitoringAgent/group/{NODE_A}\n", NODE_A),
        (f"SagemakerHealthMonitoringAgent/group/{NODE_A}\nINJECTED i-0000000000000000f", NODE_A),
        ("SagemakerHealthMonitoringAgent/group/not-an-instance", None),
        ("SagemakerHealthMonitoringAgent/", None),
        ("SagemakerHealthMonitoringAgent/" + "x/" * 300 + NODE_A, NODE_A),
        ('SagemakerHealthMonitoringAgent/"; DROP TABLE findings;--/' + NODE_A, NODE_A),
    ],
)
def test_hostile_stream_names_never_break_reading(stream, node):
    batch = read(payload(stream, [slurm_record(79)]))
    assert batch.detections == 1
    if node is None:
        assert batch.signals == () and batch.unattributed == 1
        assert batch.dropped == "detections on a stream naming no instance id"
    else:
        assert [s.node for s in batch.signals] == [node]


def test_hostile_messages_make_a_clean_one_line_reason():
    record = {"condition": "Bad\x1b[31m\nCondition\u202e" + "z" * 1000, "HealthMonitoringAgentDetectionEvent": "x"}
    messages = [
        json.dumps(record),
        "HealthMonitoringAgentDetectionEvent " + json.dumps(record),
        "{" * 5000 + "HealthMonitoringAgentDetectionEvent",
        "\x00" * 10,
    ]
    for message in messages:
        batch = read(payload(hma_stream(NODE_A), [message]))
        for signal in batch.signals:
            assert "\n" not in signal.reason and "\x1b" not in signal.reason and "\u202e" not in signal.reason
            assert len(signal.reason) <= 300


def test_the_pure_function_reads_a_decoded_payload_too():
    decoded = decode_subscription(wrap(sample()))
    batch = signals_from_payload(decoded, region=REGION)
    assert [s.node for s in batch.signals] == [NODE_A]
