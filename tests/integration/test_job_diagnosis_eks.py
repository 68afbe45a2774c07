"""Why did my PyTorchJob die, end to end on the simulator (issue 33): the job, its pods and their events read
through the fake EKS API server with the product's own Kubernetes client, the cluster read from moto, and the
answer each scenario fixes (sim/hyperpod_sim/eks_job_scenarios.py): a job that died on a faulty node, one that
died of a cause common to its nodes (a driver skew between its ranks), one that died of its own fault."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.job_diagnosis import JobRequest, diagnose_job
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.report.job import render_text
from hyperpod_sim import eks_job_scenarios as scenario
from hyperpod_sim.scenarios import REGION

FAST = ProbeOptions(rate=50.0, timeout=5.0)


@pytest.fixture(scope="module")
def _world():
    now = datetime.now(UTC)
    with scenario.simulated_eks_jobs(now) as (world, ssm, kube, endpoint):
        yield world, ssm, kube, now, endpoint


@pytest.fixture
def world(_world, monkeypatch):
    world, ssm, kube, now, endpoint = _world
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", ssm.endpoint_url)
    yield world, kube, now
    assert ssm.wait_idle() and ssm.open_sessions() == 0


def _diagnose(job: scenario.EksJob, now: datetime, **kw):
    request = JobRequest(
        cluster=scenario.EKS_JOBS_CLUSTER,
        region=REGION,
        job=f"{job.namespace}/{job.name}",
        kind="pytorchjob",
        now=now,
        probe_options=FAST,
        **kw,
    )
    return diagnose_job(request)


@pytest.mark.parametrize("index", [0, 1, 2], ids=["faulty-node", "own-fault", "cluster-wide"])
def test_each_pytorchjob_gets_the_answer_its_scenario_fixes(world, index):
    world, _, now = world
    job = world.jobs[index]
    run = _diagnose(job, now)
    assert run.error is None and run.diagnosis is not None, run.error
    diagnosis = run.diagnosis
    assert diagnosis.kind == job.expected, diagnosis.conclusion
    assert diagnosis.job.state == "Failed" and len(diagnosis.job.nodes) == len(job.workers)
    assert {n.instance_id for n in diagnosis.job.nodes} == {world.worker(job, i) for i in job.workers}
    likely = [c.instance_id for c in diagnosis.culprits if c.strength == "likely"]
    assert likely == ([world.worker(job, job.culprit)] if job.culprit is not None else [])
    assert f"Job {job.namespace}/{job.name}" in render_text(diagnosis)


def test_the_failing_pod_is_named_with_how_it_ended(world):
    world, _, now = world
    job = world.jobs[1]  # the OOMKilled master
    diagnosis = _diagnose(job, now).diagnosis
    assert diagnosis is not None and diagnosis.job.exit_code == str(job.exit_code)
    failing = next(n for n in diagnosis.job.nodes if n.instance_id == world.worker(job, job.failed_worker))
    assert failing.failed_here and any("OOMKilled" in note and "137" in note for note in failing.notes)
    assert "OOMKilled" in diagnosis.conclusion


def test_the_driver_skew_is_the_common_cause_and_names_the_lagging_node(world):
    world, _, now = world
    job = world.jobs[2]
    diagnosis = _diagnose(job, now).diagnosis
    assert diagnosis is not None and diagnosis.culprits == ()
    [common] = diagnosis.common
    assert common.evidence.section == "E" and common.evidence.instance_id is None
    assert "seen now" in common.when


def test_a_pytorchjob_that_does_not_exist_is_said_so(world):
    world, _, now = world
    missing = scenario.EksJob(scenario.NAMESPACE, "no-such-job", (0,), now, now, "own", 0, "Error", 1)
    run = _diagnose(missing, now, probe=False)
    assert run.diagnosis is None and run.error_kind == "job_not_found"
    assert "PyTorchJob training/no-such-job is not in the EKS cluster" in (run.error or "")


def test_the_kubernetes_reads_are_gets_only_and_rbac_denial_is_could_not_read(world):
    world, kube, now = world
    before = len(kube.requests)
    _diagnose(world.jobs[1], now, probe=False)
    mine = kube.requests[before:]
    assert mine and all(r.method == "GET" for r in mine)
    assert any("/pytorchjobs/sft-ablation" in r.path for r in mine)
    kube.forbid = {"pytorchjobs"}
    try:
        run = _diagnose(world.jobs[1], now, probe=False)
    finally:
        kube.forbid = set()
    assert run.diagnosis is None and run.error_kind == "could_not_read" and "RBAC" in (run.error or "")


def test_the_cli_takes_a_pytorchjob(world, capsys):
    from hyperpod_debugger.cli.main import main

    world, _, now = world
    args = ["job", "--cluster", scenario.EKS_JOBS_CLUSTER, "--region", REGION, "--no-probe"]
    assert main([*args, "--pytorchjob", "training/llama-70b"]) == 1
    assert "LIKELY CULPRIT" in capsys.readouterr().out
    assert main([*args, "--pytorchjob", "Training/llama"]) == 2
    with pytest.raises(SystemExit) as refused:  # one or the other, as argparse says
        main([*args, "--pytorchjob", "training/llama-70b", "--job", "4123"])
    assert refused.value.code == 2


def test_the_agent_tool_takes_a_pytorchjob(world):
    from hyperpod_debugger.agent import tools

    world, _, now = world
    job = world.jobs[0]
    view = tools.diagnose_job(
        lambda region: AwsClients(region, max_attempts=1),
        scenario.EKS_JOBS_CLUSTER,
        region=REGION,
        probe=False,
        pytorchjob=f"{job.namespace}/{job.name}",
    )
    assert view.kind == "node" and [c["instance_id"] for c in view.culprits] == [world.worker(job, job.culprit)]
    with pytest.raises(tools.ToolFailure):
        tools.diagnose_job(lambda region: AwsClients(region), scenario.EKS_JOBS_CLUSTER, "4123", pytorchjob="a/b")


def test_every_aws_call_the_eks_diagnosis_makes_is_in_the_policy_the_cli_prints(world):
    from hyperpod_debugger.aws.iam import policy_document

    world, _, now = world
    job = world.jobs[2]
    clients = AwsClients(REGION, max_attempts=1)
    request = JobRequest(
        cluster=scenario.EKS_JOBS_CLUSTER,
        region=REGION,
        job=f"{job.namespace}/{job.name}",
        kind="pytorchjob",
        now=now,
        probe_options=FAST,
    )
    assert diagnose_job(request, clients).diagnosis is not None
    granted = {a for s in policy_document()["Statement"] for a in s["Action"]}
    made = set(clients.calls) - {"sts:GetCallerIdentity"}  # needs no permission
    assert {"sagemaker:DescribeCluster", "eks:DescribeCluster", "ssm:StartSession"} <= made
    assert made <= granted, made - granted


def test_support_case_with_a_pytorchjob_drafts_the_culprits_case(world, capsys):
    from hyperpod_debugger.cli.main import main

    world, _, now = world
    job = world.jobs[0]
    args = ["support-case", "--cluster", scenario.EKS_JOBS_CLUSTER, "--region", REGION]
    assert main([*args, "--pytorchjob", f"{job.namespace}/{job.name}"]) == 0
    draft = capsys.readouterr().out
    assert f"# Draft AWS Support case: {world.worker(job, job.culprit)} in {scenario.EKS_JOBS_CLUSTER}" in draft
    assert "## The training job" in draft and f"Job {job.namespace}/{job.name}" in draft
    assert main([*args, "--pytorchjob", "not a job"]) == 2
