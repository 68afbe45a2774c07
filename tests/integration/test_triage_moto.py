"""Triage end to end on moto: the real adapters, the real API shapes, injected service faults."""

from __future__ import annotations

import json
import pathlib

import jsonschema
import pytest

from hyperpod_debugger.domain.model import CheckStatus, Tag
from hyperpod_debugger.report.text import render_json
from hyperpod_debugger.triage import TriageRequest, run_triage
from hyperpod_sim import scenarios, seed
from hyperpod_sim.seed import GroupSpec
from tests.fakes import inject_error, inject_response

SCHEMA = json.loads((pathlib.Path(__file__).parents[2] / "references" / "triage-report.schema.json").read_text())


def _triage(clients, cluster, now, **kw):
    return run_triage(TriageRequest(cluster=cluster, region=scenarios.REGION, now=now, **kw), clients)


def _sections(report, *tags):
    return {f.section for f in report.findings if f.tag.value in tags}


def test_demo_eks_cluster_shows_every_seeded_fault(demo, clients, now):
    report = _triage(clients, demo.eks.name, now)
    problems = _sections(report, "FAIL", "WARN")
    assert {"A", "B.1", "B.2", "B.3", "B.4", "B.5", "C", "D", "F", "G", "J"} <= problems
    assert report.exit_code == 1
    assert report.cluster.cluster_id == demo.eks.cluster_id and report.cluster.orchestrator == "EKS"


def test_report_json_validates_against_the_documented_schema(demo, clients, now):
    for name in (demo.eks.name, demo.slurm.name):
        jsonschema.validate(json.loads(render_json(_triage(clients, name, now))), SCHEMA)


def test_healthy_parts_pass(demo, clients, now):
    report = _triage(clients, demo.slurm.name, now)
    passed = {f.check for f in report.findings if f.tag is Tag.PASS}
    assert {"network.efa_sg", "vpc.dns", "vpc.routing", "vpc.endpoints", "cluster.status"} <= passed


def test_arn_input_uses_the_cluster_name_for_the_log_group(demo, clients, now):
    report = _triage(clients, demo.eks.arn, now)
    [group] = [f for f in report.findings if f.check == "logs.log_group"]
    assert group.tag is Tag.PASS and f"/aws/sagemaker/Clusters/{demo.eks.name}/{demo.eks.cluster_id}" in group.message


def test_events_window_excludes_old_events_and_counts_api_calls(demo, clients, now):
    report = _triage(clients, demo.eks.name, now)
    [capacity] = [f for f in report.findings if f.check == "cluster.events" and f.section == "C"]
    assert capacity.message.startswith("2 Error event(s)")  # the 3-day-old one is outside 24 h
    assert report.coverage.api_calls["sagemaker:ListClusterEvents"] == 1
    assert report.coverage.api_calls["sagemaker:DescribeClusterEvent"] == 2  # one per distinct failure


def test_opaque_tokens_with_any_characters_are_followed(clients, now, aws):
    cluster = seed.create_cluster(
        clients.client("sagemaker"),
        scenarios.REGION,
        "many-events",
        [GroupSpec("w", "ml.g5.8xlarge", 1)],
        None,
        orchestrator=None,
        node_recovery="Automatic",
        provisioning_mode="Continuous",
        launch_time=now,
    )
    for n in range(250):
        seed.add_event(
            cluster,
            when=now.replace(minute=0) - __import__("datetime").timedelta(minutes=n),
            level="Warn",
            description=f"Instance i-{n:017x} reboot was requested",
            group="w",
            instance=f"i-{n:017x}",
        )
    report = _triage(clients, cluster.name, now)
    assert report.coverage.api_calls["sagemaker:ListClusterEvents"] == 3
    [warn] = [f for f in report.findings if f.check == "cluster.events" and f.is_problem]
    assert warn.message.startswith("250 Warn event(s)")


def test_unknown_cluster_lists_the_regions_clusters(demo, clients, now):
    report = _triage(clients, "no-such-cluster", now)
    assert report.error is not None and report.error.kind == "cluster_not_found"
    assert any(demo.eks.name in c for c in report.error.clusters_in_region)
    assert report.exit_code == 3


def test_expired_credentials_stop_the_run_with_a_clear_error(demo, clients, now):
    inject_error(
        clients,
        "sts",
        "GetCallerIdentity",
        "ExpiredToken",
        status=403,
        message="The security token included in the request is expired",
    )
    report = _triage(clients, demo.eks.name, now)
    assert report.error.kind == "credentials" and "expired" in report.error.message
    assert report.exit_code == 3 and not report.findings


@pytest.mark.parametrize(
    ("service", "operation", "code", "action"),
    [
        ("ec2", "DescribeSecurityGroups", "UnauthorizedOperation", "ec2:DescribeSecurityGroups"),
        ("sagemaker", "ListClusterEvents", "AccessDeniedException", "sagemaker:ListClusterEvents"),
        ("logs", "FilterLogEvents", "AccessDeniedException", "logs:FilterLogEvents"),
        ("service-quotas", "GetServiceQuota", "AccessDeniedException", "servicequotas:GetServiceQuota"),
        ("eks", "DescribeCluster", "AccessDeniedException", "eks:DescribeCluster"),
    ],
)
def test_access_denied_on_any_single_api_is_a_finding_and_the_run_continues(
    demo, clients, now, service, operation, code, action
):
    inject_error(clients, service, operation, code, status=403)
    report = _triage(clients, demo.eks.name, now)
    iam = [f for f in report.findings if f.check == "iam.permission"]
    assert [f.message.split(" (")[0] for f in iam] == [f"Missing IAM permission {action}"]
    assert iam[0].section != "K" or action.startswith("sts")
    # the rest of the triage still ran
    ran = {c.check for c in report.coverage.checks if c.status is CheckStatus.RAN}
    assert {"cluster.status", "nodes.status", "vpc.dns"} <= ran


def test_throttling_after_retries_is_unknown_not_a_verdict(demo, clients, now):
    inject_error(clients, "ec2", "DescribeRouteTables", "RequestLimitExceeded", status=503)
    report = _triage(clients, demo.eks.name, now)
    [f] = [f for f in report.findings if f.check == "vpc.routing"]
    assert f.tag is Tag.UNKNOWN and "throttled" in f.message


def test_service_500_is_unknown(demo, clients, now):
    inject_error(clients, "ec2", "DescribeSubnets", "InternalError", status=500)
    report = _triage(clients, demo.eks.name, now)
    unknown = {c.check for c in report.coverage.checks if c.status is CheckStatus.UNKNOWN}
    assert {"vpc.subnet_ips", "vpc.alignment"} <= unknown
    assert not any(f.tag is Tag.PASS and f.check == "vpc.subnet_ips" for f in report.findings)


def test_malformed_node_page_is_unknown_not_zero_nodes(demo, clients, now):
    inject_response(clients, "sagemaker", "ListClusterNodes", {"NextToken": ""})
    report = _triage(clients, demo.eks.name, now)
    [f] = [f for f in report.findings if f.check == "nodes.status"]
    assert f.tag is Tag.UNKNOWN and "malformed" in f.message


def test_cluster_without_vpc_config_is_stated_not_crashed(clients, now, aws):
    seed.create_cluster(
        clients.client("sagemaker"),
        scenarios.REGION,
        "no-vpc",
        [GroupSpec("w", "ml.g5.8xlarge", 2)],
        None,
        orchestrator=None,
        node_recovery="Automatic",
        provisioning_mode=None,
        launch_time=now,
    )
    report = _triage(clients, "no-vpc", now)
    assert any(f.check == "vpc.alignment" and f.tag is Tag.WARN for f in report.findings)
    skipped = {c.check for c in report.coverage.checks if c.status is CheckStatus.SKIPPED}
    assert "network.efa_sg" in skipped


def test_focus_node_describes_only_that_node(demo, clients, now):
    iid = demo.eks.nodes["gpu-workers"][2]
    report = _triage(clients, demo.eks.name, now, node=iid)
    assert report.coverage.api_calls["sagemaker:DescribeClusterNode"] == 1
    node_findings = [f for f in report.findings if f.check == "nodes.status" and f.is_problem]
    assert [f.instance_id for f in node_findings] == [iid]


def test_eks_checks_read_the_cluster_named_by_the_orchestrator(demo, clients, now):
    # GIVEN another EKS cluster in the account that has nothing to do with HyperPod
    clients.client("eks").create_cluster(
        name="unrelated", roleArn="arn:aws:iam::123456789012:role/x", resourcesVpcConfig={"subnetIds": []}
    )
    # WHEN the HyperPod cluster is triaged
    report = _triage(clients, demo.eks.name, now)
    # THEN the EKS findings are about the cluster in Orchestrator.Eks.ClusterArn only
    eks_findings = [f for f in report.findings if f.check == "eks.prerequisites"]
    assert eks_findings and not any("unrelated" in f.message for f in eks_findings)
    assert report.cluster.eks_cluster_arn.endswith(f"cluster/{scenarios.EKS_CLUSTER}-eks")


def test_a_failed_deep_health_check_counts_as_an_issue(clients, now, aws):
    seed.create_cluster(
        clients.client("sagemaker"),
        scenarios.REGION,
        "dhc",
        [GroupSpec("w", "ml.g5.8xlarge", 2)],
        None,
        orchestrator=None,
        node_recovery="Automatic",
        provisioning_mode=None,
        launch_time=now,
        node_states={("w", 0): seed.NodeState("Failure", "Deep health check failed: DCGM diagnostic level 4")},
    )
    report = _triage(clients, "dhc", now)
    [f] = [f for f in report.findings if f.check == "nodes.status" and f.is_problem]
    assert f.tag is Tag.FAIL and f.section == "F"
    assert report.summary.P1 >= 1 and report.exit_code == 1


def test_unreachable_endpoint_is_a_clear_error_not_a_traceback(monkeypatch, now):
    import socket

    from hyperpod_debugger.aws.clients import AwsClients

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    report = run_triage(
        TriageRequest(cluster="c1", region=scenarios.REGION, now=now),
        AwsClients(scenarios.REGION, max_attempts=1, connect_timeout=1),
    )
    assert report.error is not None and report.error.kind == "endpoint"
    assert report.exit_code == 3


def test_missing_credentials_are_a_clear_error(monkeypatch, now):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    from hyperpod_debugger.aws.clients import AwsClients

    report = run_triage(TriageRequest(cluster="c1", region=scenarios.REGION, now=now), AwsClients(scenarios.REGION))
    assert report.error is not None and report.error.kind == "credentials"
    assert report.exit_code == 3


def test_json_carries_the_runbook_link_ladder_and_filled_in_commands(demo, clients, now):
    doc = json.loads(render_json(_triage(clients, demo.eks.name, now)))
    problems = [f for f in doc["findings"] if f["tag"] in ("FAIL", "WARN", "UNKNOWN")]
    assert all(f["runbook"].startswith("references/node-diagnostics-detail.md#") for f in problems)
    [hma] = [f for f in problems if f["check"] == "logs.hma" and f["priority"] == "P0"]
    assert hma["node_action"] == "replace" and hma["next_step"]
    replace = hma["suggested_commands"][-1]
    assert replace["step"] == "replace" and replace["mutates"] and hma["instance_id"] in replace["purpose"]
    # the cluster is in Continuous provisioning mode: the call names the node by the NodeLogicalId
    # ListClusterNodes gives it when asked (IncludeNodeLogicalIds)
    listed = clients.client("sagemaker").list_cluster_nodes(ClusterName=demo.eks.name, IncludeNodeLogicalIds=True)
    logical = {n["InstanceId"]: n["NodeLogicalId"] for n in listed["ClusterNodeSummaries"]}
    assert f"--node-logical-ids {logical[hma['instance_id']]}" in replace["command"]
    assert "root and secondary volumes" in replace["blast_radius"] and replace["iac_warning"]
    for f in problems:
        for c in f["suggested_commands"]:
            if c["mutates"]:
                assert c["blast_radius"] and c["iac_warning"] and c["preconditions"]
