"""Why did my job die, end to end on the simulator (issue 33): the job read on the Slurm controller through the
fake Session Manager, the cluster read from moto, and the answer each scenario fixes
(sim/hyperpod_sim/job_scenarios.py): a job that died on a faulty node, one that died of a cluster-wide cause,
and one that died of its own fault."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.job_diagnosis import JobRequest, diagnose_job
from hyperpod_debugger.probe.options import ProbeOptions
from hyperpod_debugger.report.job import render_json, render_text
from hyperpod_sim import job_scenarios
from hyperpod_sim.fake_ssm import FakeSsm
from hyperpod_sim.scenarios import REGION
from hyperpod_sim.server import simulated_aws

FAST = ProbeOptions(rate=50.0, timeout=5.0)


@pytest.fixture(scope="module")
def _world():
    now = datetime.now(UTC)
    with simulated_aws() as endpoint, FakeSsm(start_session_rate=50.0) as ssm:
        world = job_scenarios.seed_jobs(AwsClients(REGION, max_attempts=1), now)
        job_scenarios.register_job_nodes(ssm, world, now)
        yield world, ssm, now, endpoint


@pytest.fixture
def world(_world, monkeypatch):
    world, ssm, now, endpoint = _world
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", ssm.endpoint_url)
    yield world, ssm, now
    assert ssm.wait_idle() and ssm.open_sessions() == 0


def _diagnose(job: job_scenarios.Job, now: datetime, **kw):
    return diagnose_job(
        JobRequest(cluster=job.cluster, region=REGION, job=job.job_id, now=now, probe_options=FAST, **kw)
    )


@pytest.mark.parametrize("index", [0, 1, 2], ids=["faulty-node", "own-fault", "cluster-wide"])  # without a table
def test_each_job_gets_the_answer_its_scenario_fixes(world, index):
    world, _, now = world
    job = world.jobs[index]
    run = _diagnose(job, now)
    assert run.error is None and run.diagnosis is not None
    diagnosis = run.diagnosis
    assert diagnosis.kind == job.expected, diagnosis.conclusion
    assert diagnosis.job.state == job.state and len(diagnosis.job.nodes) == len(job.workers)
    assert all(n.instance_id for n in diagnosis.job.nodes)  # every Slurm node name resolved to its instance
    likely = [c.instance_id for c in diagnosis.culprits if c.strength == "likely"]
    assert likely == ([world.worker(job, job.culprit)] if job.culprit is not None else [])
    text = render_text(diagnosis)
    assert f"Job {job.job_id} ({job.name}, {job.user})" in text and "Read:" in text
    assert render_json(diagnosis).startswith("{")


def test_the_faulty_node_is_placed_by_its_health_agent_detection_inside_the_window(world):
    world, _, now = world
    diagnosis = _diagnose(world.jobs[0], now).diagnosis
    assert diagnosis is not None
    [culprit] = diagnosis.culprits
    [placed] = [p for p in culprit.evidence if p.evidence.source == "health_agent"]
    # its next rung's commands, as the triage offers them: read-only ones to investigate first (one rung at a time)
    assert culprit.commands and all(not c.mutates for c in culprit.commands)
    assert all(culprit.instance_id in c.command for c in culprit.commands)
    # the scenario: the job started ten hours ago, Xid 79 an hour later, the job ended two minutes after that
    assert placed.evidence.message.startswith("the health agent detected Xid 79")
    assert placed.when.endswith("60 min into the job")


def test_the_cluster_wide_cause_is_the_efa_security_group(world):
    world, _, now = world
    diagnosis = _diagnose(world.jobs[2], now).diagnosis
    assert diagnosis is not None
    assert diagnosis.common and diagnosis.common[0].evidence.section == "A"


def test_a_job_the_controller_does_not_know_is_said_so_not_guessed(world):
    world, _, now = world
    missing = job_scenarios.Job(job_scenarios.JOBS_CLUSTER, "999", "", "", "", "", (), now, now, "own")
    run = _diagnose(missing, now)
    assert run.diagnosis is None and run.error_kind == "job_not_found"
    assert "job 999 is not among the jobs the controller holds" in (run.error or "")


def test_nothing_sent_to_a_node_writes(world):
    world, ssm, now = world
    _diagnose(world.jobs[1], now)
    commands = ["".join(ssm.session(i).parameters.get("command", [])) for i in ssm.session_ids()]
    assert any("scontrol show job" in c for c in commands)
    for command in commands:  # the jobs command, the Slurm query and probe.sh, nothing else
        assert not any(w in command for w in ("scancel", "scontrol update", "scontrol requeue", "sbatch"))


def test_every_call_the_diagnosis_makes_is_in_the_policy_the_cli_prints(world):
    from hyperpod_debugger.aws.iam import policy_document

    world, _, now = world
    clients = AwsClients(REGION, max_attempts=1)
    diagnose_job(
        JobRequest(cluster=world.jobs[0].cluster, region=REGION, job="4123", now=now, probe_options=FAST), clients
    )
    granted = {a for s in policy_document()["Statement"] for a in s["Action"]}
    made = set(clients.calls) - {"sts:GetCallerIdentity"}  # needs no permission
    assert {"sagemaker:DescribeCluster", "sagemaker:ListClusterNodes", "ssm:StartSession"} <= made
    assert made <= granted, made - granted


def test_a_fault_only_the_findings_history_knows_is_placed_with_the_table_and_unknown_without(world):
    from hyperpod_debugger.store.findings import FindingStore

    world, _, now = world
    job = next(j for j in world.jobs if j.needs_table)
    clients = AwsClients(REGION, max_attempts=1)
    table = job_scenarios.seed_history(clients, world, now, "job-diagnosis-findings")
    # without the table: nothing read on the nodes explains the exit
    assert (_diagnose(job, now, probe=False).diagnosis or pytest.fail("no diagnosis")).kind == "own"
    # with it: worker 1's row remap, open from half an hour before the job ended (and resolved after it)
    request = JobRequest(cluster=job.cluster, region=REGION, job=job.job_id, now=now, probe=False, probe_options=FAST)
    diagnosis = diagnose_job(request, clients, FindingStore(clients, table)).diagnosis
    assert diagnosis is not None and diagnosis.kind == "node"
    [culprit] = diagnosis.culprits
    assert culprit.instance_id == world.worker(job, 1) and culprit.strength == "likely"
    [placed] = culprit.evidence
    assert placed.evidence.source == "finding" and placed.evidence.check == "probe.gpu_remap"
    assert placed.when.endswith(", 30 min into the job")  # the sweep found it half an hour before the job ended
    assert any("the monitor's findings history" in r for r in diagnosis.read)


def test_the_agent_tool_gives_the_same_answer_as_the_cli(world):
    from hyperpod_debugger.agent import tools

    world, _, now = world
    job = world.jobs[0]
    view = tools.diagnose_job(lambda region: AwsClients(region, max_attempts=1), job.cluster, job.job_id, region=REGION)
    assert view.kind == "node" and [c["instance_id"] for c in view.culprits] == [world.worker(job, job.culprit)]
    with pytest.raises(tools.ToolFailure) as refused:
        tools.diagnose_job(lambda region: AwsClients(region), job.cluster, "4123; reboot", region=REGION)
    assert refused.value.kind == "invalid_argument"


def test_support_case_with_a_job_drafts_the_case_for_the_culprit_with_the_jobs_context(world, capsys):
    from hyperpod_debugger.cli.main import main

    world, _, now = world
    job = world.jobs[0]
    assert main(["support-case", "--cluster", job.cluster, "--job", job.job_id, "--region", REGION]) == 0
    draft = capsys.readouterr().out
    assert f"# Draft AWS Support case: {world.worker(job, job.culprit)} in {job.cluster}" in draft
    assert "## The training job" in draft and "Job 4123 (llama-70b-pretrain, alice) ran on 4 node(s)" in draft
    assert "Xid 79" in draft
    # a job whose diagnosis names no node gets no case, and says why
    assert main(["support-case", "--cluster", job.cluster, "--job", "4131", "--region", REGION]) == 1
    assert "names no culprit node" in capsys.readouterr().err


def test_the_cli_prints_the_diagnosis_and_exits_by_what_it_found(world, capsys):
    from hyperpod_debugger.cli.main import main

    world, _, now = world
    assert (
        main(["job", "--cluster", job_scenarios.JOBS_CLUSTER, "--job", "4123", "--region", REGION, "--no-probe"]) == 1
    )
    assert "LIKELY CULPRIT" in capsys.readouterr().out
    assert main(["job", "--cluster", job_scenarios.JOBS_CLUSTER, "--job", "4131", "--region", REGION, "--json"]) == 0
    assert '"kind": "own"' in capsys.readouterr().out
    assert main(["job", "--cluster", job_scenarios.JOBS_CLUSTER, "--job", "12;ls", "--region", REGION]) == 2
