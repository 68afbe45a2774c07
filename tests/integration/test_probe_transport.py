"""The probe end to end through the fake Session Manager service: triage and `probe` print on-node
findings; every transport fault is a typed outcome; sessions never leak."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.cli.main import main
from hyperpod_debugger.domain.model import Tag
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.triage import TriageRequest, run_triage
from hyperpod_sim import scenarios
from hyperpod_sim.fake_ssm import FakeSsm, Faults
from hyperpod_sim.server import simulated_aws

FAST = ProbeOptions(rate=50.0, timeout=5.0)


@pytest.fixture(scope="module")
def _world():
    now = datetime.now(UTC)
    with simulated_aws() as endpoint, FakeSsm(start_session_rate=50.0) as ssm:
        demo = scenarios.seed_demo(AwsClients(scenarios.REGION, max_attempts=1), now)
        targets = scenarios.register_probe_nodes(ssm, demo, now)
        yield demo, ssm, targets, now, endpoint


@pytest.fixture
def world(_world, monkeypatch):
    demo, ssm, targets, now, endpoint = _world
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", ssm.endpoint_url)
    calls_before = len(ssm.start_calls)
    yield demo, ssm, targets, now
    for target in targets:
        ssm.set_faults(None, target=target)
    assert ssm.wait_idle(), "a data channel is still open"
    assert ssm.open_sessions() == 0, "a session leaked"
    assert not ssm.internal_errors
    assert len(ssm.start_calls) >= calls_before


def _triage(demo, now, **kw):
    return run_triage(
        TriageRequest(
            cluster=demo.name, region=scenarios.REGION, now=now, probe=True, probe_options=kw.pop("options", FAST), **kw
        )
    )


def test_triage_probes_running_nodes_and_reports_on_node_faults(world):
    demo, ssm, _, now = world
    report = _triage(demo.eks, now)
    by_check = {(f.check, f.instance_id) for f in report.findings if f.tag is Tag.FAIL}
    bad = demo.eks.nodes["gpu-workers"][1]
    assert ("probe.gpu_count", bad) in by_check and ("probe.xid", bad) in by_check
    [xid] = [f for f in report.findings if f.check == "probe.xid" and f.instance_id == bad]
    assert xid.node_action == "replace" and xid.suggested_commands[-1].step == "replace"
    # every session that started was terminated, and the report counts every StartSession call
    assert set(ssm.terminated) >= {c.session_id for c in ssm.start_calls if c.session_id}
    assert report.coverage.api_calls.get("ssm:StartSession", 0) >= len(ssm.started)


def test_triage_names_the_node_of_gpu_workers_left_on_an_older_driver(world):
    # GIVEN the demo's gpu-workers 0 runs NVIDIA driver 570.195.03 and gpu-workers 1 runs 580.95.05 (§ E)
    demo, _, _, now = world
    report = _triage(demo.eks, now)
    skews = [f for f in report.findings if f.check == "probe.software_skew" and f.is_problem]
    # THEN exactly one finding: the driver, in that group, both versions named, the odd node listed
    [skew] = skews
    assert skew.tag is Tag.FAIL and skew.priority is not None and skew.priority.value == "P1"
    assert skew.section == "E" and skew.instance_group == "gpu-workers"
    assert skew.message == "1 of 2 nodes of gpu-workers run NVIDIA driver 570.195.03; 1 run 580.95.05"
    old, new = demo.eks.nodes["gpu-workers"][0], demo.eks.nodes["gpu-workers"][1]
    assert any(e.startswith("570.195.03") and old in e for e in skew.evidence)
    assert any(e.startswith("580.95.05") and new in e for e in skew.evidence)
    assert any("update-cluster-software" in c.command and c.mutates for c in skew.suggested_commands)
    [covered] = [c for c in report.coverage.checks if c.check == "probe.software_skew"]
    assert covered.status.value == "ran"


def test_probe_command_runs_on_one_node(world, capsys):
    demo, _, _, _ = world
    node = demo.slurm.nodes["worker-group-1"][0]
    code = main(
        [
            "probe",
            "--cluster",
            demo.slurm.name,
            "--region",
            scenarios.REGION,
            "--node",
            node,
            "--json",
            "--probe-rate",
            "50",
            "--probe-timeout",
            "10",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    sections = {f["section"] for f in report["findings"] if f["tag"] in ("FAIL", "WARN")}
    assert {"G.1.a", "I.2", "H"} <= sections and code == 1
    assert all(f["instance_id"] == node for f in report["findings"] if f["check"].startswith("probe."))


def test_probe_of_an_unknown_node_fails_clearly(world, capsys):
    demo, _, _, _ = world
    code = main(["probe", "--cluster", demo.eks.name, "--region", scenarios.REGION, "--node", "i-0aaaaaaaaaaaaaaaa"])
    # refused before any session: the cluster does not have that node (an invalid argument, exit 2)
    assert code == 2 and "is not a node of cluster" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("faults", "outcome", "timeout"),
    [
        # the hang needs a short deadline to end; the others answer at once, and a deadline of seconds on a
        # busy machine would turn their answer into a TIMEOUT (seen in CI), so they get room
        (Faults(hang=True), "TIMEOUT", 2.0),
        (Faults(kms_required=True), "ENCRYPTION_REQUIRED", 60.0),
        (Faults(access_denied=True), "DENIED", 60.0),
        (Faults(not_connected=True), "UNREACHABLE", 60.0),
    ],
)
def test_transport_faults_are_unknown_in_section_k(world, faults, outcome, timeout):
    demo, ssm, targets, now = world
    node = demo.eks.nodes["gpu-workers"][0]
    [target] = [t for t in targets if t.endswith(node)]
    ssm.set_faults(faults, target=target)
    report = _triage(demo.eks, now, node=node, options=ProbeOptions(rate=50.0, timeout=timeout))
    [f] = [f for f in report.findings if f.check == "probe.session"]
    assert f.tag is Tag.UNKNOWN and f.section == "K" and f"({outcome})" in f.message
    assert not any(c.mutates for c in f.suggested_commands)


def test_throttled_starts_are_retried(world):
    demo, ssm, targets, now = world
    node = demo.eks.nodes["gpu-workers"][0]
    [target] = [t for t in targets if t.endswith(node)]
    ssm.set_faults(Faults(throttle_first_n=2), target=target)
    report = _triage(demo.eks, now, node=node)
    assert not [f for f in report.findings if f.check == "probe.session"]
    assert any(f.check == "probe.xid" for f in report.findings)


def test_no_probe_leaves_the_nodes_alone(world):
    demo, ssm, _, now = world
    before = len(ssm.start_calls)
    report = run_triage(TriageRequest(cluster=demo.eks.name, region=scenarios.REGION, now=now, probe=False))
    assert len(ssm.start_calls) == before
    assert any(c.check == "probe.session" and c.status == "skipped" for c in report.coverage.checks)


# --------------------------------------------------------------------------- pinned session documents


@pytest.fixture
def pinned(world):
    """The stack's pinned Session documents, created in the fake Session Manager."""
    from hyperpod_debugger.aws.ssm_documents import SessionDocuments
    from hyperpod_sim.lambda_harness import create_session_documents

    suffix = uuid.uuid4().hex[:8]  # the fake lives for the module; each test gets its own documents
    names = {"probe": f"HpdProbe-{suffix}", "slurm": f"HpdSlurm-{suffix}"}
    created = create_session_documents(AwsClients(scenarios.REGION, max_attempts=1), names)
    return world, SessionDocuments(**created)


def test_a_triage_with_pinned_documents_runs_each_command_through_its_document(pinned):
    (demo, ssm, _, now), documents = pinned
    before = set(ssm.session_ids())
    report = _triage(demo.slurm, now, options=ProbeOptions(rate=50.0, timeout=5.0, documents=documents))
    assert any(f.check.startswith("probe.") and f.tag is Tag.FAIL for f in report.findings)
    assert any(f.check.startswith("slurm.") for f in report.findings)
    sessions = [ssm.session(i) for i in ssm.session_ids() if i not in before]
    assert sessions
    # every session named a pinned document and sent no parameter: the document chose the command
    assert {s.document_name for s in sessions} == {documents.probe, documents.slurm}
    assert all(s.parameters == {} for s in sessions)
    from hyperpod_debugger.aws.ssm_documents import pinned_line
    from hyperpod_debugger.probe.pinned import command_of

    assert {s.command for s in sessions} == {pinned_line(command_of("probe")), pinned_line(command_of("slurm"))}
    # the exit status still came back through the document's own marker
    assert report.coverage.probed_nodes


def test_a_command_no_pinned_document_carries_is_refused_before_any_call(pinned):
    import asyncio

    from hyperpod_debugger.aws.ssm_types import SessionError
    from hyperpod_debugger.probe.pinned import ssm_runner

    (demo, ssm, targets, _), documents = pinned
    calls = len(ssm.start_calls)
    run = ssm_runner(AwsClients(scenarios.REGION, max_attempts=1), scenarios.REGION, 5.0, documents)
    with pytest.raises(SessionError) as refused:
        asyncio.run(run(targets[0], "cat /etc/shadow"))
    assert refused.value.outcome == "DENIED" and len(ssm.start_calls) == calls


def test_the_fake_refuses_what_a_document_does_not_declare(pinned):
    import botocore.exceptions

    (_, _, targets, _), documents = pinned
    ssm_client = AwsClients(scenarios.REGION, max_attempts=1).client("ssm")
    with pytest.raises(botocore.exceptions.ClientError, match="InvalidParameters"):
        ssm_client.start_session(Target=targets[0], DocumentName=documents.probe, Parameters={"command": ["id"]})
    with pytest.raises(botocore.exceptions.ClientError, match="InvalidDocument"):
        ssm_client.start_session(Target=targets[0], DocumentName="NoSuchDocument")
    content = json.loads(ssm_client.get_document(Name=documents.probe)["Content"])
    assert content["sessionType"] == "NonInteractiveCommands"
