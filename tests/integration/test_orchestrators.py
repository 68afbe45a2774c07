"""Orchestrator checks end to end: the EKS cluster's Kubernetes API (fake, same token and TLS path)
and the Slurm controller read through the fake Session Manager agent."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.domain.model import Tag
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.triage import TriageRequest, run_triage
from hyperpod_sim import scenarios
from hyperpod_sim.fake_k8s import FakeKubernetes
from hyperpod_sim.fake_ssm import FakeSsm, Faults
from hyperpod_sim.server import simulated_aws

FAST = ProbeOptions(rate=50.0, timeout=5.0)


@pytest.fixture(scope="module")
def _world():
    now = datetime.now(UTC)
    with (
        simulated_aws() as endpoint,
        FakeSsm(start_session_rate=50.0) as ssm,
        FakeKubernetes(cluster_name=f"{scenarios.EKS_CLUSTER}-eks") as kube,
    ):
        demo = scenarios.seed_demo(AwsClients(scenarios.REGION, max_attempts=1), now)
        targets = scenarios.register_probe_nodes(ssm, demo, now)
        scenarios.register_kubernetes(kube, demo)
        yield demo, ssm, kube, targets, now, endpoint


@pytest.fixture
def world(_world, monkeypatch):
    demo, ssm, kube, targets, now, endpoint = _world
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", ssm.endpoint_url)
    yield demo, ssm, kube, targets, now
    kube.forbid = set()
    for target in targets:
        ssm.set_faults(None, target=target)
    assert ssm.wait_idle() and ssm.open_sessions() == 0


def _triage(name, now, probe=True, **kw):
    return run_triage(
        TriageRequest(cluster=name, region=scenarios.REGION, now=now, probe=probe, probe_options=FAST, **kw)
    )


def _problems(report, prefix):
    return [f for f in report.findings if f.check.startswith(prefix) and f.is_problem]


def test_eks_labels_and_pods_give_f_g_o_findings_with_safe_commands(world):
    demo, _, kube, _, now = world
    report = _triage(demo.eks.name, now)
    k8s = _problems(report, "k8s.")
    assert {"F", "G", "O"} <= {f.section for f in k8s}
    [cni] = [f for f in k8s if f.check == "k8s.cni"]  # one finding for the DaemonSet problem
    commands = [c.command for c in cni.suggested_commands]
    assert any("logs" in c and "-c aws-node" in c for c in commands)
    mutating = [c for c in cni.suggested_commands if c.mutates]
    assert mutating and all(c.blast_radius and c.iac_warning and c.preconditions for c in mutating)
    # the token path was used: the fake checked a presigned GetCallerIdentity for this cluster
    assert any(r.status == 200 and r.path == "/api/v1/nodes" for r in kube.requests)


def test_a_node_pending_reboot_gets_no_second_action(world):
    demo, _, _, _, now = world
    pending = demo.eks.nodes["gpu-workers"][3]
    report = _triage(demo.eks.name, now)
    mine = [f for f in report.findings if f.instance_id == pending and f.is_problem]
    assert mine and not any(c.step in ("reboot", "replace") for f in mine for c in f.suggested_commands)


def test_rbac_denial_is_unknown_not_a_missing_iam_permission(world):
    demo, _, kube, _, now = world
    kube.forbid = {"nodes"}
    report = _triage(demo.eks.name, now, probe=False)
    [health] = [f for f in report.findings if f.check == "k8s.node_health"]
    assert health.tag is Tag.UNKNOWN and "RBAC" in " ".join([health.message, *health.evidence])
    assert not any(f.check == "iam.permission" and "kubernetes" in f.message for f in report.findings)
    # the other Kubernetes reads still worked
    assert any(f.check == "k8s.cni" for f in report.findings)


def test_slurm_controller_is_confirmed_and_node_states_reported(world):
    demo, _, _, _, now = world
    report = _triage(demo.slurm.name, now)
    [controller] = [f for f in report.findings if f.check == "slurm.controller"]
    assert controller.tag is Tag.PASS and "scontrol ping" in controller.message
    nodes = _problems(report, "slurm.nodes")
    assert {f.section for f in nodes} == {"H"}
    down = next(f for f in nodes if "unexpectedly rebooted" in " ".join([f.message, *f.evidence]).lower())
    # HyperPod's agent saw Xid 79 on that node, so its verdict is a reboot: the Slurm finding no longer
    # offers to resume it beside the drain (one rung per node)
    assert down.instance_id and not any("state=resume" in c.command for c in down.suggested_commands)
    [verdict] = [v for v in report.node_verdicts if v.instance_id == down.instance_id]
    assert verdict.verdict == "reboot" and "state=drain" in (verdict.next_command or "")
    drained = next(f for f in nodes if "Kill task failed" in f.message)
    assert not any("state=resume" in c.command for c in drained.suggested_commands)


def test_an_unreachable_controller_is_unknown_never_a_false_fail(world):
    demo, ssm, _, targets, now = world
    controller = demo.slurm.nodes["controller-machine"][0]
    [target] = [t for t in targets if t.endswith(controller)]
    ssm.set_faults(Faults(not_connected=True), target=target)
    report = _triage(demo.slurm.name, now)
    slurm = [f for f in report.findings if f.check.startswith("slurm.")]
    assert slurm and all(f.tag is Tag.UNKNOWN for f in slurm)


def test_no_probe_skips_slurm_with_the_reason(world):
    demo, _, _, _, now = world
    report = _triage(demo.slurm.name, now, probe=False)
    skipped = {c.check: c.reason for c in report.coverage.checks if c.status == "skipped"}
    assert "session on the controller" in skipped["slurm.controller"]
