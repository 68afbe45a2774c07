"""CloudWatch Logs checks: log group, lifecycle script failures, HMA detections and the repeat-Xid rule."""

from __future__ import annotations

import json
import pathlib
import shlex
from datetime import timedelta

import pytest

from hyperpod_debugger.checks.base import CheckContext
from hyperpod_debugger.checks.logs import (
    CHECKS,
    HMA_MARKER,
    INCIDENT_GAP,
    check_hma,
    check_lifecycle,
    check_log_group,
    parse_hma_message,
    parse_stream_name,
)
from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.domain.observations import (
    ApiFailure,
    ClusterObservation,
    LogEvent,
    NotApplicable,
    Observed,
    Unobservable,
    VpcConfig,
)
from tests.builders import NOW, REGION, SUBNET, cluster, context, group, logs, node, observation

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hyperpod"
EKS_HMA = "hma-cloudwatch-npd-xid71-nvlink-eks-docexample.json"
SLURM_HMA = "hma-cloudwatch-slurm-dcgm-policy-violation-xid79.json"
LIFECYCLE_XTRACE = "lifecycleconfig-log-eks-on-create-start.txt"

IID = "i-0123456789abcdef0"
OTHER_IID = "i-0fedcba9876543210"
HOSTILE = ["g1;rm -rf /", "$(id)", "`reboot`", "a b'c\"d"]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def hma_event(message: str, *, instance: str = IID, grp: str = "workers", age: timedelta = timedelta(hours=1)):
    return LogEvent(f"SagemakerHealthMonitoringAgent/{grp}/{instance}", NOW - age, message)


def lifecycle_event(text: str, *, instance: str = IID, grp: str = "workers", stream: str | None = None):
    return LogEvent(stream or f"LifecycleConfig/{grp}/{instance}", NOW - timedelta(minutes=30), text)


def with_hma(*events: LogEvent, **obs_overrides) -> ClusterObservation:
    return observation(logs=logs(hma_events=Observed.ok(list(events))), **obs_overrides)


def with_lifecycle(*events: LogEvent, **obs_overrides) -> ClusterObservation:
    # By default the node whose log is read is the failing one (its lifecycle run did not finish).
    obs_overrides.setdefault("nodes", Observed.ok([node(IID, status="Failure", message="lifecycle")]))
    return observation(logs=logs(lifecycle_events=Observed.ok(list(events))), **obs_overrides)


def xid_record(code: int, text: str = "Graphics Exception", *, pci: str = "0000:b9:00") -> str:
    """A one-line EKS-shaped HMA record (the real records are one JSON object per event)."""
    nvrm = f"NVRM: Xid (PCI:{pci}): {code}, pid=4242, name=python3, {text}"
    return json.dumps(
        {
            "level": "info",
            "ts": "2026-11-30T10:00:00Z",
            "msg": "NPD caught event: %v",
            "details": {
                "severity": "warn",
                "timestamp": "2026-11-30T10:00:00Z",
                "reason": "XidHardwareFailure",
                "message": "Node condition NvidiaErrorReboot is now: True, reason: XidHardwareFailure, "
                f'message: "{nvrm}"',
            },
            "HealthMonitoringAgentDetectionEvent": "HealthEvent",
        }
    )


def commands_of(findings: list[Finding]) -> list[str]:
    return [c.command for f in findings for c in f.suggested_commands]


def only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, [f.message for f in findings]
    return findings[0]


# =========================================================================== CHECKS registry


def test_given_the_module_when_imported_then_it_exports_the_three_log_checks_with_their_sections() -> None:
    assert {c.id: c.section for c in CHECKS} == {
        "logs.log_group": "L",
        "logs.lifecycle": "D",
        "logs.hma": "F",
    }
    assert [c.run for c in CHECKS] == [check_log_group, check_lifecycle, check_hma]


# =========================================================================== logs.log_group


def test_given_the_log_group_exists_when_checked_then_it_passes_naming_the_group() -> None:
    finding = only(check_log_group(observation(), context()))
    assert finding.tag is Tag.PASS
    assert finding.priority is None
    assert "/aws/sagemaker/Clusters/demo-cluster/abcd1234efgh" in finding.message
    assert finding.check == "logs.log_group"


def test_given_no_log_group_when_checked_then_a_p2_warning_gives_the_expected_name() -> None:
    obs = observation(logs=logs(group_exists=Observed.ok(False)))
    finding = only(check_log_group(obs, context()))
    assert (finding.tag, finding.priority, finding.section) == (Tag.WARN, Priority.P2, "L")
    assert "new" in finding.message and "logging" in finding.message
    assert any("/aws/sagemaker/Clusters/demo-cluster/abcd1234efgh" in line for line in finding.evidence)
    assert not any(c.mutates for c in finding.suggested_commands)


def test_given_the_group_name_from_cluster_name_and_id_when_missing_then_that_exact_name_is_reported() -> None:
    # the name is built from ClusterName + cluster id, never from an ARN-form argument
    name = "/aws/sagemaker/Clusters/my-ml-cluster/zz9plural1"
    obs = observation(logs=logs(group_name=name, group_exists=Observed.ok(False)))
    finding = only(check_log_group(obs, context()))
    assert finding.evidence == [f"expected log group: {name}"]
    assert shlex.split(finding.suggested_commands[0].command)[-1] == name


def test_given_describe_log_groups_was_denied_when_checked_then_the_failure_propagates() -> None:
    denied = ApiFailure("logs:DescribeLogGroups", "denied", "AccessDenied")
    obs = observation(logs=logs(group_exists=Observed.failed(denied)))
    with pytest.raises(Unobservable):
        check_log_group(obs, context())


# =========================================================================== logs.lifecycle


def test_given_the_real_xtrace_lifecycle_log_when_checked_then_no_failure_is_reported() -> None:
    obs = with_lifecycle(lifecycle_event(fixture(LIFECYCLE_XTRACE)))
    finding = only(check_lifecycle(obs, context()))
    assert finding.tag is Tag.PASS
    assert "1 LifecycleConfig" in finding.message


def test_given_the_real_xtrace_log_split_into_one_event_per_line_when_checked_then_it_still_passes() -> None:
    events = [lifecycle_event(line) for line in fixture(LIFECYCLE_XTRACE).splitlines()]
    assert only(check_lifecycle(with_lifecycle(*events), context())).tag is Tag.PASS


def test_given_no_lifecycle_events_when_checked_then_it_passes_saying_there_was_nothing_to_read() -> None:
    finding = only(check_lifecycle(observation(), context()))
    assert finding.tag is Tag.PASS
    assert "No LifecycleConfig log lines" in finding.message


S3_TIMEOUT = [
    "[start] on_create.sh",
    "+ aws s3 cp --recursive s3://sagemaker-lifecycle-123456789012/scripts/ /tmp/lcc",
    'fatal error: Connect timeout on endpoint URL: "https://sagemaker-lifecycle-123456789012.s3.us-west-2'
    '.amazonaws.com/?list-type=2&prefix=scripts%2F&encoding-type=url"',
]
S3_UNREACHABLE = [
    "+ aws s3 cp s3://sagemaker-lifecycle-123456789012/scripts/on_create.sh /tmp/on_create.sh",
    'download failed: Could not connect to the endpoint URL: "https://sagemaker-lifecycle-123456789012.s3'
    '.amazonaws.com/scripts/on_create.sh"',
]
ACCESS_DENIED = [
    "+ aws s3 sync s3://sagemaker-lifecycle-123456789012/scripts/ /tmp/lcc",
    "fatal error: An error occurred (AccessDenied) when calling the ListObjectsV2 operation: Access Denied",
]
FORBIDDEN = [
    "+ aws s3 cp s3://sagemaker-lifecycle-123456789012/scripts/on_create.sh .",
    "fatal error: An error occurred (403) when calling the HeadObject operation: Forbidden",
]
CRLF_DOLLAR_R = [
    "[start] on_create.sh",
    "/tmp/lcc/on_create.sh: line 2: $'\\r': command not found",
    "/tmp/lcc/on_create.sh: line 9: syntax error near unexpected token `$'{\\r''",
]
CRLF_BAD_INTERPRETER = ["/bin/sh: /tmp/lcc/on_create.sh: /bin/bash^M: bad interpreter: No such file or directory"]
CRLF_RAW_CR = ["/tmp/lcc/on_create.sh: line 7: apt-get\r: command not found"]
PARAMS_KEYERROR = [
    "+ python3 -u lifecycle_script.py",
    "Traceback (most recent call last):",
    '  File "/tmp/lcc/lifecycle_script.py", line 151, in <module>',
    "    main(args)",
    '  File "/tmp/lcc/lifecycle_script.py", line 120, in main',
    '    group = params["worker_groups"][node_group]',
    "KeyError: 'workers'",
]
PARAMS_FILE = [
    "Reading /opt/ml/config/provisioning_parameters.json",
    "ERROR: instance group 'gpu-workers' from provisioning_parameters.json not found in resource_config.json",
]
SCRIPT_APT = [
    "+ apt-get install -y nvidia-container-toolkit",
    "Reading package lists...",
    "E: Unable to locate package nvidia-container-toolkit",
]
SCRIPT_EXIT = [
    "[start] mount_fsx.sh",
    "+ '[' -z '' ']'",
    "+ echo 'FSx DNS name missing, giving up'",
    "+ exit 1",
]
SCRIPT_CALLED_PROCESS = [
    "subprocess.CalledProcessError: Command '['bash', './setup_mariadb_accounting.sh']' returned non-zero "
    "exit status 1.",
]


@pytest.mark.parametrize(
    ("lines", "fragment", "matching"),
    [
        (S3_TIMEOUT, "could not reach Amazon S3", [S3_TIMEOUT[2]]),
        (S3_UNREACHABLE, "could not reach Amazon S3", [S3_UNREACHABLE[1]]),
        (ACCESS_DENIED, "an AWS call was denied", [ACCESS_DENIED[1]]),
        (FORBIDDEN, "an AWS call was denied", [FORBIDDEN[1]]),
        (CRLF_DOLLAR_R, "CRLF", CRLF_DOLLAR_R[1:]),
        (CRLF_BAD_INTERPRETER, "CRLF", CRLF_BAD_INTERPRETER),
        (CRLF_RAW_CR, "CRLF", CRLF_RAW_CR),
        (PARAMS_KEYERROR, "provisioning_parameters.json", ["KeyError: 'workers'"]),
        (PARAMS_FILE, "provisioning_parameters.json", [PARAMS_FILE[1]]),
        (SCRIPT_APT, "a command in the script failed", [SCRIPT_APT[2]]),
        (SCRIPT_EXIT, "a command in the script failed", ["+ exit 1"]),
        (SCRIPT_CALLED_PROCESS, "a command in the script failed", SCRIPT_CALLED_PROCESS),
    ],
)
def test_given_a_lifecycle_error_when_checked_then_one_p1_failure_names_the_cause_with_its_lines(
    lines: list[str], fragment: str, matching: list[str]
) -> None:
    obs = with_lifecycle(lifecycle_event("\n".join(lines)))
    finding = only(check_lifecycle(obs, context()))
    assert (finding.tag, finding.priority, finding.section) == (Tag.FAIL, Priority.P1, "D")
    assert fragment in finding.message
    # a carriage return is evidence of the cause: it is shown, as the two characters a reader can see
    assert finding.evidence == [line.rstrip().replace("\r", "\\x0d") for line in matching]
    assert (finding.instance_id, finding.instance_group) == (IID, "workers")
    assert finding.root_cause
    assert not any(c.mutates for c in finding.suggested_commands)


def test_given_an_s3_timeout_when_checked_then_the_root_cause_and_commands_point_at_the_s3_endpoint() -> None:
    finding = only(check_lifecycle(with_lifecycle(lifecycle_event("\n".join(S3_TIMEOUT))), context()))
    assert "gateway endpoint" in (finding.root_cause or "")
    argvs = [shlex.split(c) for c in commands_of([finding])]
    assert ["aws", "ec2", "describe-vpc-endpoints"] in [a[:3] for a in argvs]
    assert f"Name=service-name,Values=com.amazonaws.{REGION}.s3" in [tok for a in argvs for tok in a]
    assert any(a[:3] == ["aws", "ec2", "describe-route-tables"] for a in argvs)


def test_given_a_group_with_its_own_subnets_when_s3_times_out_then_only_that_groups_subnets_are_shown() -> None:
    override = VpcConfig(security_group_ids=("sg-0override00000001",), subnet_ids=("subnet-0override0000001",))
    obs = with_lifecycle(
        lifecycle_event("\n".join(S3_TIMEOUT), grp="gpu"),
        cluster=cluster(instance_groups=(group(), group(name="gpu", override_vpc=override))),
    )
    routes = [c for c in commands_of(check_lifecycle(obs, context())) if "describe-route-tables" in c]
    assert [shlex.split(c)[-1] for c in routes] == ["Name=association.subnet-id,Values=subnet-0override0000001"]


def test_given_a_group_without_override_when_s3_times_out_then_the_cluster_subnets_are_shown() -> None:
    override = VpcConfig(security_group_ids=("sg-0override00000001",), subnet_ids=("subnet-0override0000001",))
    obs = with_lifecycle(
        lifecycle_event("\n".join(S3_TIMEOUT)),
        cluster=cluster(instance_groups=(group(), group(name="gpu", override_vpc=override))),
    )
    routes = [c for c in commands_of(check_lifecycle(obs, context())) if "describe-route-tables" in c]
    assert [shlex.split(c)[-1] for c in routes] == [f"Name=association.subnet-id,Values={SUBNET}"]


def test_given_any_lifecycle_failure_when_checked_then_the_stream_read_command_is_suggested_exactly() -> None:
    finding = only(check_lifecycle(with_lifecycle(lifecycle_event("\n".join(SCRIPT_APT))), context()))
    assert shlex.split(finding.suggested_commands[0].command) == [
        "aws",
        "logs",
        "get-log-events",
        "--region",
        REGION,
        "--log-group-name",
        "/aws/sagemaker/Clusters/demo-cluster/abcd1234efgh",
        "--log-stream-name",
        f"LifecycleConfig/workers/{IID}",
        "--limit",
        "100",
        "--no-start-from-head",
    ]


def test_given_access_denied_with_a_known_role_and_bucket_when_checked_then_the_role_is_simulated() -> None:
    finding = only(check_lifecycle(with_lifecycle(lifecycle_event("\n".join(ACCESS_DENIED))), context()))
    simulated = [shlex.split(c) for c in commands_of([finding]) if "simulate-principal-policy" in c]
    assert len(simulated) == 2
    assert "arn:aws:s3:::sagemaker-lifecycle/scripts/on_create.sh" in simulated[0]
    assert "arn:aws:s3:::sagemaker-lifecycle" in simulated[1]
    assert "arn:aws:iam::123456789012:role/hyperpod-exec" in simulated[0]


def test_given_a_parameter_mismatch_when_checked_then_the_cluster_group_names_are_listed_for_comparison() -> None:
    finding = only(check_lifecycle(with_lifecycle(lifecycle_event("\n".join(PARAMS_KEYERROR))), context()))
    assert any("describe-cluster" in c and "InstanceGroups[].InstanceGroupName" in c for c in commands_of([finding]))


@pytest.mark.parametrize(
    "line",
    [
        'fatal error: Connect timeout on endpoint URL: "https://sts.us-west-2.amazonaws.com/"',
        'Connect timeout on endpoint URL: "https://sts.us-west-2.amazonaws.com/"',
        "fatal error: Unable to locate credentials",
        "mount: /fsx: mount point does not exist.",
    ],
)
def test_given_an_error_that_is_not_about_s3_when_checked_then_it_is_a_generic_script_failure(
    line: str,
) -> None:
    finding = only(check_lifecycle(with_lifecycle(lifecycle_event(line)), context()))
    assert "a command in the script failed" in finding.message
    assert finding.evidence == [line]


def test_given_an_instance_group_the_script_does_not_know_when_checked_then_it_is_a_parameter_mismatch() -> None:
    line = "Instance group gpu-workers not found in the cluster configuration"
    finding = only(check_lifecycle(with_lifecycle(lifecycle_event(line)), context()))
    assert "provisioning_parameters.json" in finding.message


def test_given_a_keyerror_on_a_non_group_name_when_checked_then_it_is_a_generic_script_failure() -> None:
    lines = ["Traceback (most recent call last):", "KeyError: 'HOME'"]
    finding = only(check_lifecycle(with_lifecycle(lifecycle_event("\n".join(lines))), context()))
    assert "a command in the script failed" in finding.message
    assert finding.evidence == lines


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        (ACCESS_DENIED + CRLF_DOLLAR_R, "denied"),
        (CRLF_DOLLAR_R + ACCESS_DENIED, "denied"),
        (S3_TIMEOUT + ACCESS_DENIED, "could not reach Amazon S3"),
        (SCRIPT_APT + CRLF_RAW_CR, "CRLF"),
        (SCRIPT_APT + PARAMS_FILE, "provisioning_parameters.json"),
    ],
)
def test_given_several_error_kinds_in_one_stream_when_checked_then_the_first_documented_cause_wins(
    lines: list[str], fragment: str
) -> None:
    finding = only(check_lifecycle(with_lifecycle(lifecycle_event("\n".join(lines))), context()))
    assert fragment in finding.message


@pytest.mark.parametrize(
    "line",
    [
        "+ echo 'ERROR handling enabled'",
        "+ grep -i error /var/log/cloud-init.log",
        "++ aws s3 cp s3://bucket/x /tmp/x --cli-connect-timeout 5",
        "+ exit 0",
        "Ran 12 tests: 0 failed",
    ],
)
def test_given_only_benign_or_xtrace_lines_that_mention_errors_when_checked_then_it_passes(line: str) -> None:
    text = "\n".join(["[start] on_create.sh", line, "[stop] on_create.sh"])
    assert only(check_lifecycle(with_lifecycle(lifecycle_event(text)), context())).tag is Tag.PASS


def test_given_one_failing_and_one_clean_stream_when_checked_then_only_the_failing_node_is_reported() -> None:
    obs = with_lifecycle(
        lifecycle_event(fixture(LIFECYCLE_XTRACE), instance=OTHER_IID),
        lifecycle_event("\n".join(SCRIPT_APT)),
    )
    finding = only(check_lifecycle(obs, context()))
    assert finding.instance_id == IID


def test_given_error_lines_spread_over_several_events_when_checked_then_they_are_judged_per_stream() -> None:
    obs = with_lifecycle(*(lifecycle_event(line) for line in ACCESS_DENIED))
    finding = only(check_lifecycle(obs, context()))
    assert finding.evidence == [ACCESS_DENIED[1]]


def test_given_many_matching_lines_when_checked_then_evidence_is_trimmed_and_counts_the_rest() -> None:
    lines = [f"E: Unable to locate package pkg{i}" for i in range(30)]
    finding = only(check_lifecycle(with_lifecycle(lifecycle_event("\n".join(lines))), context()))
    assert len(finding.evidence) == 21
    assert finding.evidence[-1] == "… and 10 more"


@pytest.mark.parametrize(
    "stream",
    ["LifecycleConfig/workers", "LifecycleConfig/workers/not-an-instance", "LifecycleConfig"],
)
def test_given_an_odd_stream_name_when_a_failure_is_found_then_it_is_still_reported_without_an_instance(
    stream: str,
) -> None:
    obs = with_lifecycle(lifecycle_event("\n".join(SCRIPT_APT), stream=stream))
    finding = only(check_lifecycle(obs, context()))
    assert finding.tag is Tag.FAIL
    assert finding.instance_id is None
    assert stream in finding.message


def test_given_lifecycle_logs_could_not_be_read_when_checked_then_the_failure_propagates() -> None:
    failure = ApiFailure("logs:FilterLogEvents", "throttled", "Rate exceeded")
    obs = observation(logs=logs(lifecycle_events=Observed.failed(failure)))
    with pytest.raises(Unobservable):
        check_lifecycle(obs, context())


# =========================================================================== logs.hma — real records


def test_given_the_real_eks_hma_record_when_checked_then_a_single_xid71_is_a_p1_gpu_warning() -> None:
    finding = only(check_hma(with_hma(hma_event(fixture(EKS_HMA))), context()))
    assert (finding.tag, finding.priority, finding.section) == (Tag.WARN, Priority.P1, "G")
    assert "Xid 71" in finding.message and IID in finding.message
    assert (finding.instance_id, finding.instance_group) == (IID, "workers")
    assert any("NVLink: fatal error detected on link 6" in line for line in finding.evidence)
    assert not any(c.mutates for c in finding.suggested_commands)


def test_given_the_real_slurm_hma_record_with_colon_keys_when_checked_then_xid79_is_found() -> None:
    finding = only(check_hma(with_hma(hma_event(fixture(SLURM_HMA))), context()))
    assert (finding.tag, finding.priority, finding.section) == (Tag.WARN, Priority.P1, "G")
    assert "Xid 79" in finding.message
    assert "replaces" in finding.message


@pytest.mark.parametrize(
    ("name", "codes", "reason", "condition"),
    [
        (EKS_HMA, (71,), "XidHardwareFailure", "NvidiaErrorReboot"),
        (SLURM_HMA, (79,), None, "XID Error"),
    ],
)
def test_given_a_real_hma_record_when_parsed_then_code_reason_and_condition_are_extracted(
    name: str, codes: tuple[int, ...], reason: str | None, condition: str
) -> None:
    assert parse_hma_message(fixture(name)) == (codes, reason, condition, True)


def test_given_the_pretty_and_the_one_line_form_of_a_record_when_checked_then_the_findings_agree() -> None:
    pretty = fixture(EKS_HMA)
    one_line = json.dumps(json.loads(pretty))
    assert "\n" in pretty and "\n" not in one_line
    first = only(check_hma(with_hma(hma_event(pretty)), context()))
    second = only(check_hma(with_hma(hma_event(one_line)), context()))
    assert first.message == second.message


# =========================================================================== logs.hma — repeat-Xid rule


def test_given_a_hardware_xid_twice_on_one_node_when_checked_then_a_p0_failure_suggests_replacement() -> None:
    obs = with_hma(
        hma_event(fixture(SLURM_HMA), age=timedelta(hours=5)),
        hma_event(fixture(SLURM_HMA), age=timedelta(hours=1)),
    )
    finding = only(check_hma(obs, context()))
    assert (finding.tag, finding.priority, finding.section) == (Tag.FAIL, Priority.P0, "F")
    assert "Xid 79" in finding.message and "replace" in finding.message
    assert finding.evidence[0].startswith("2 incident(s), 2 detection record(s), first 2026-11-30T07:00:00Z")
    assert "last 2026-11-30T11:00:00Z" in finding.evidence[0]
    assert sum(1 for line in finding.evidence if "DCGM Policy Violation" in line) == 2


def test_given_a_recurring_hardware_xid_when_checked_then_replace_is_the_node_action_after_a_read() -> None:
    obs = with_hma(
        hma_event(xid_record(48, "An uncorrectable double bit error"), age=timedelta(days=2)),
        hma_event(xid_record(48, "An uncorrectable double bit error"), age=timedelta(hours=2)),
    )
    finding = only(check_hma(obs, context()))
    # The check states the rung; the suggestion engine (ladder.refine) builds the replace command.
    assert finding.node_action == "replace"
    first = finding.suggested_commands[0]
    assert not any(c.mutates for c in finding.suggested_commands)
    assert shlex.split(first.command) == [
        "aws",
        "sagemaker",
        "describe-cluster-node",
        "--region",
        REGION,
        "--cluster-name",
        "demo-cluster",
        "--node-id",
        IID,
    ]


def test_given_a_higher_threshold_when_the_hardware_xid_is_seen_twice_then_it_stays_a_warning() -> None:
    obs = with_hma(
        hma_event(fixture(SLURM_HMA), age=timedelta(hours=5)),
        hma_event(fixture(SLURM_HMA), age=timedelta(hours=1)),
    )
    finding = only(check_hma(obs, context(xid_repeat_threshold=3)))
    assert (finding.tag, finding.priority) == (Tag.WARN, Priority.P1)
    assert "2 times" in finding.message


def test_given_a_threshold_of_three_when_the_hardware_xid_is_seen_three_times_then_it_fails() -> None:
    obs = with_hma(*(hma_event(fixture(SLURM_HMA), age=timedelta(hours=h)) for h in (1, 3, 5)))
    assert only(check_hma(obs, context(xid_repeat_threshold=3))).tag is Tag.FAIL


def test_given_duplicate_records_seconds_apart_when_checked_then_they_count_as_one_incident() -> None:
    obs = with_hma(
        hma_event(fixture(SLURM_HMA), age=timedelta(hours=1)),
        hma_event(fixture(SLURM_HMA), age=timedelta(hours=1) - timedelta(seconds=30)),
        hma_event(fixture(SLURM_HMA), age=timedelta(hours=1) - INCIDENT_GAP + timedelta(seconds=1)),
    )
    finding = only(check_hma(obs, context()))
    assert (finding.tag, finding.priority) == (Tag.WARN, Priority.P1)
    assert finding.evidence[0].startswith("1 incident(s), 3 detection record(s)")


def test_given_the_same_xid_on_two_different_nodes_when_checked_then_neither_counts_as_a_recurrence() -> None:
    obs = with_hma(
        hma_event(fixture(SLURM_HMA), age=timedelta(hours=5)),
        hma_event(fixture(SLURM_HMA), instance=OTHER_IID, age=timedelta(hours=1)),
    )
    findings = check_hma(obs, context())
    assert [(f.tag, f.instance_id) for f in findings] == [(Tag.WARN, IID), (Tag.WARN, OTHER_IID)]


def test_given_two_different_hardware_xids_on_one_node_when_checked_then_each_is_judged_on_its_own() -> None:
    obs = with_hma(
        hma_event(xid_record(74, "NVLink: fatal error detected on link 3"), age=timedelta(hours=5)),
        hma_event(xid_record(79, "GPU has fallen off the bus."), age=timedelta(hours=1)),
    )
    findings = check_hma(obs, context())
    assert [f.tag for f in findings] == [Tag.WARN, Tag.WARN]
    assert ["Xid 74" in findings[0].message, "Xid 79" in findings[1].message] == [True, True]


def test_given_a_recurring_xid_on_a_stream_without_instance_id_then_no_node_command_is_guessed() -> None:
    events = [
        LogEvent("SagemakerHealthMonitoringAgent/workers", NOW - timedelta(hours=h), fixture(SLURM_HMA)) for h in (1, 4)
    ]
    finding = only(check_hma(with_hma(*events), context()))
    assert finding.tag is Tag.FAIL
    assert finding.instance_id is None
    assert not any(c.mutates for c in finding.suggested_commands)
    assert not any("describe-cluster-node" in c.command for c in finding.suggested_commands)


# =========================================================================== logs.hma — windowing


def test_given_a_detection_older_than_the_window_when_checked_then_it_is_ignored() -> None:
    obs = with_hma(hma_event(fixture(SLURM_HMA), age=timedelta(days=8)))
    finding = only(check_hma(obs, context()))
    assert finding.tag is Tag.PASS
    assert finding.message == "No HMA detections in the last 7 days"


def test_given_a_detection_just_inside_the_window_when_checked_then_it_counts() -> None:
    obs = with_hma(hma_event(fixture(SLURM_HMA), age=timedelta(days=7) - timedelta(minutes=1)))
    assert only(check_hma(obs, context())).tag is Tag.WARN


def test_given_an_old_and_a_recent_detection_when_checked_then_the_old_one_does_not_make_a_recurrence() -> None:
    obs = with_hma(
        hma_event(fixture(SLURM_HMA), age=timedelta(days=30)),
        hma_event(fixture(SLURM_HMA), age=timedelta(hours=1)),
    )
    finding = only(check_hma(obs, context()))
    assert (finding.tag, finding.priority) == (Tag.WARN, Priority.P1)


def test_given_a_shorter_window_when_checked_then_the_pass_message_states_it() -> None:
    obs = with_hma(hma_event(fixture(SLURM_HMA), age=timedelta(days=3)))
    finding = only(check_hma(obs, context(log_window=timedelta(days=2))))
    assert finding.message == "No HMA detections in the last 2 days"


def test_given_no_hma_events_when_checked_then_it_passes() -> None:
    finding = only(check_hma(observation(), context()))
    assert (finding.tag, finding.priority) == (Tag.PASS, None)


def test_given_the_event_time_and_the_record_ts_differ_when_windowed_then_the_event_time_decides() -> None:
    # the record's own "ts" is 2024; the CloudWatch event time is one hour ago
    assert only(check_hma(with_hma(hma_event(fixture(EKS_HMA))), context())).tag is Tag.WARN


# =========================================================================== logs.hma — application and other


def test_given_an_application_xid_repeatedly_when_checked_then_a_p2_workload_warning_has_no_node_action() -> None:
    obs = with_hma(
        *(hma_event(xid_record(13, "Graphics SM Warp Exception"), age=timedelta(hours=h)) for h in (1, 3, 5))
    )
    finding = only(check_hma(obs, context()))
    assert (finding.tag, finding.priority, finding.section) == (Tag.WARN, Priority.P2, "G")
    assert "workload" in finding.message
    assert not any(c.mutates for c in finding.suggested_commands)
    assert not any("reboot" in c.command or "replace" in c.command for c in finding.suggested_commands)
    assert [shlex.split(c.command)[:3] for c in finding.suggested_commands] == [["aws", "logs", "filter-log-events"]]


@pytest.mark.parametrize("code", [31, 43, 45, 69])
def test_given_other_application_xids_when_checked_then_none_suggests_touching_the_node(code: int) -> None:
    obs = with_hma(*(hma_event(xid_record(code), age=timedelta(hours=h)) for h in (1, 4)))
    finding = only(check_hma(obs, context()))
    assert (finding.tag, finding.priority) == (Tag.WARN, Priority.P2)
    assert not any(c.mutates for c in finding.suggested_commands)


def test_given_an_ambiguous_xid_repeatedly_when_checked_then_it_is_a_p1_warning_to_investigate() -> None:
    obs = with_hma(*(hma_event(xid_record(109, "CTX SWITCH TIMEOUT"), age=timedelta(hours=h)) for h in (1, 4)))
    finding = only(check_hma(obs, context()))
    assert (finding.tag, finding.priority, finding.section) == (Tag.WARN, Priority.P1, "G")
    assert not any(c.mutates for c in finding.suggested_commands)


def test_given_an_hma_detection_without_an_xid_when_checked_then_a_p1_warning_carries_the_reason() -> None:
    record = json.dumps(
        {
            "level": "info",
            "ts": "2026-11-30T10:00:00Z",
            "msg": "NPD caught event: %v",
            "details": {
                "severity": "warn",
                "reason": "GpuCountMismatch",
                "message": "expected 8 GPUs, found 7",
            },
            "HealthMonitoringAgentDetectionEvent": "HealthEvent",
        }
    )
    finding = only(check_hma(with_hma(hma_event(record)), context()))
    assert (finding.tag, finding.priority, finding.section) == (Tag.WARN, Priority.P1, "F")
    assert "'GpuCountMismatch'" in finding.message
    assert any("expected 8 GPUs, found 7" in line for line in finding.evidence)


def test_given_a_pretty_detection_without_reason_when_checked_then_the_record_is_the_reason() -> None:
    record = json.dumps({"msg": "NPD caught event: %v", HMA_MARKER: "HealthEvent"}, indent=2)
    finding = only(check_hma(with_hma(hma_event(record)), context()))
    assert (finding.tag, finding.section) == (Tag.WARN, "F")
    assert "NPD caught event" in finding.message


def test_given_a_plain_text_kernel_line_as_message_when_checked_then_its_xid_is_used() -> None:
    text = fixture("hyperpod-hma-inject-xid74-nvlink-syslog.txt")
    finding = only(check_hma(with_hma(hma_event(text)), context()))
    assert "Xid 74" in finding.message
    assert finding.evidence[1].endswith(text.strip())


def test_given_a_plain_text_message_naming_an_xid_in_words_when_checked_then_the_code_is_used() -> None:
    finding = only(check_hma(with_hma(hma_event("HealthMonitoringAgent: XID 79 detected on GPU 3")), context()))
    assert "Xid 79" in finding.message


def test_given_a_record_behind_a_text_prefix_when_parsed_then_the_json_is_still_read() -> None:
    message = "2026-11-30T10:00:00Z INFO " + json.dumps(json.loads(fixture(EKS_HMA)))
    assert parse_hma_message(message) == ((71,), "XidHardwareFailure", "NvidiaErrorReboot", True)


def test_given_one_record_naming_the_same_xid_twice_when_checked_then_it_is_one_detection() -> None:
    record = json.dumps(
        {
            "condition: ": "XID Error",
            "data: ": {"ErrNum": 79},
            "msg": "NVRM: Xid (PCI:0000:91:00): 79, GPU has fallen off the bus.",
        }
    )
    finding = only(check_hma(with_hma(hma_event(record)), context()))
    assert finding.evidence[0].startswith("1 incident(s), 1 detection record(s)")


# ================================================================= logs.hma — hostile and broken input


@pytest.mark.parametrize(
    "message",
    [
        '{"level":"info","ts":"2026-07-20T22:53:17Z","msg":"DCGM Policy Violation found ",'
        '"condition: ":"XID Error",'
        '"data: ":{"ErrNum":79',
        '{"HealthMonitoringAgentDetectionEvent": "HealthEvent", '
        '"details": {"reason": "XidHardwareFailure", "message": '
        '"Node condition NvidiaErrorReboot is now: True, message: \\"NVRM: Xid (PCI:0000:b9:00): 79, pid=',
    ],
)
def test_given_a_truncated_json_record_when_checked_then_the_xid_is_still_recovered(message: str) -> None:
    finding = only(check_hma(with_hma(hma_event(message)), context()))
    assert "Xid 79" in finding.message


@pytest.mark.parametrize(
    "message",
    [
        "}{ HealthMonitoringAgentDetectionEvent not json at all",
        '{"HealthMonitoringAgentDetectionEvent": "HealthEvent", "details": "oops", "data: ": [1, 2]}',
        '{"HealthMonitoringAgentDetectionEvent": "HealthEvent", "data: ": {"ErrNum": true}}',
        '{"HealthMonitoringAgentDetectionEvent": "HealthEvent", "data: ": {"ErrNum": "seventy"}}',
        "[" * 5000 + "]" * 5000,
        '{"a": ' * 3000 + "1" + "}" * 3000,
        "\x00\x01 garbage \ufffd",
        "   ",
        "null",
        '"just a string"',
    ],
)
def test_given_a_malformed_message_when_checked_then_no_exception_and_no_node_action(message: str) -> None:
    findings = check_hma(with_hma(hma_event(message)), context())
    assert len(findings) == 1
    assert findings[0].tag in (Tag.PASS, Tag.WARN)
    assert not any(c.mutates for c in findings[0].suggested_commands)


@pytest.mark.parametrize("errnum", ["true", "false", '"seventy"', "0", "-79", "1e9", "null", "[79]"])
def test_given_an_errnum_that_is_not_a_code_when_parsed_then_no_xid_is_invented(errnum: str) -> None:
    message = '{"HealthMonitoringAgentDetectionEvent": "HealthEvent", "data: ": {"ErrNum": ' + errnum + "}}"
    codes, _, _, is_detection = parse_hma_message(message)
    assert codes == ()
    assert is_detection


def test_given_an_unrelated_agent_log_line_when_checked_then_it_is_not_a_detection() -> None:
    message = json.dumps({"level": "info", "ts": "2026-11-30T10:00:00Z", "msg": "health check loop started"})
    assert only(check_hma(with_hma(hma_event(message)), context())).tag is Tag.PASS


def test_given_hma_logs_could_not_be_read_when_checked_then_the_failure_propagates() -> None:
    failure = ApiFailure("logs:FilterLogEvents", "denied", "AccessDenied")
    with pytest.raises(Unobservable):
        check_hma(observation(logs=logs(hma_events=Observed.failed(failure))), context())


def test_given_hma_logs_were_skipped_when_checked_then_not_applicable_propagates() -> None:
    with pytest.raises(NotApplicable):
        check_hma(observation(logs=logs(hma_events=Observed.skip("log group missing"))), context())


def _all_log_findings(name: str) -> list[Finding]:
    """Every log check over an observation whose cluster, group and log group carry ``name``."""
    obs = observation(
        cluster=cluster(name=name, instance_groups=(group(name=name),)),
        logs=logs(
            group_name=f"/aws/sagemaker/Clusters/{name}/abcd1234efgh",
            group_exists=Observed.ok(False),
            lifecycle_events=Observed.ok(
                [
                    lifecycle_event("\n".join(lines), grp=name, instance=iid)
                    for lines, iid in (
                        (S3_TIMEOUT, IID),
                        (ACCESS_DENIED, OTHER_IID),
                        (PARAMS_KEYERROR, "i-0aaaaaaaaaaaaaaa1"),
                    )
                ]
            ),
            hma_events=Observed.ok([hma_event(fixture(SLURM_HMA), grp=name, age=timedelta(hours=h)) for h in (1, 5)]),
        ),
    )
    ctx = context()
    return check_log_group(obs, ctx) + check_lifecycle(obs, ctx) + check_hma(obs, ctx)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_given_hostile_names_when_any_log_check_suggests_commands_then_each_name_stays_one_shell_token(
    hostile: str,
) -> None:
    findings = _all_log_findings(hostile)
    benign = _all_log_findings("safe")
    assert [f.tag for f in findings] == [Tag.WARN, Tag.FAIL, Tag.FAIL, Tag.FAIL, Tag.FAIL]
    commands, benign_commands = commands_of(findings), commands_of(benign)
    assert len(commands) == len(benign_commands) >= 10
    # the hostile text never adds, removes or splits a shell word
    assert [len(shlex.split(c)) for c in commands] == [len(shlex.split(c)) for c in benign_commands]
    tokens = [tok for c in commands for tok in shlex.split(c)]
    assert f"/aws/sagemaker/Clusters/{hostile}/abcd1234efgh" in tokens
    assert hostile in tokens  # the cluster name after --cluster-name
    assert f"LifecycleConfig/{hostile}/{IID}" in tokens
    assert f"SagemakerHealthMonitoringAgent/{hostile}/{IID}" in tokens
    assert findings[-1].instance_group == hostile


# =========================================================================== stream names


@pytest.mark.parametrize(
    ("stream", "grp", "iid"),
    [
        (f"LifecycleConfig/workers/{IID}", "workers", IID),
        (f"LifecycleConfig/g1;rm -rf //{IID}", "g1;rm -rf /", IID),
        ("LifecycleConfig/workers/i-bogus", "workers", None),
        ("LifecycleConfig/workers", None, None),
        (f"weird-{IID}-stream", None, IID),
        (f"SagemakerHealthMonitoringAgent/workers/{IID}", None, IID),
        ("", None, None),
    ],
)
def test_given_a_stream_name_when_parsed_then_group_and_instance_are_taken_only_when_valid(
    stream: str, grp: str | None, iid: str | None
) -> None:
    parsed = parse_stream_name(stream, "LifecycleConfig")
    assert (parsed.group, parsed.instance_id, parsed.raw) == (grp, iid, stream)


def test_given_a_context_when_built_by_the_builders_then_the_defaults_are_what_these_tests_assume() -> None:
    ctx = context()
    assert isinstance(ctx, CheckContext)
    assert (ctx.log_window, ctx.xid_repeat_threshold, ctx.now) == (timedelta(days=7), 2, NOW)


def test_generic_error_lines_of_a_running_node_are_a_low_priority_warning():
    # GIVEN a vague error line in the lifecycle log of a node that is Running (its script finished)
    obs = with_lifecycle(
        lifecycle_event("curl: (22) The requested URL returned error: 404 - retrying"),
        lifecycle_event("+ exit 1"),
        nodes=Observed.ok([node(IID, status="Running")]),
    )
    # WHEN checked
    [f] = check_lifecycle(obs, context())
    # THEN it is not reported as a failed provisioning
    assert (f.tag, f.priority) == (Tag.WARN, Priority.P2)
    assert "Running" in f.message


def test_specific_causes_stay_failures_even_on_a_running_node():
    obs = with_lifecycle(
        lifecycle_event('fatal error: Connect timeout on endpoint URL: "https://b.s3.us-west-2.amazonaws.com/x"'),
        nodes=Observed.ok([node(IID, status="Running")]),
    )
    [f] = check_lifecycle(obs, context())
    assert (f.tag, f.priority) == (Tag.FAIL, Priority.P1)
