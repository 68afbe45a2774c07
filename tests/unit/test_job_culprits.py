"""Why did the job die (issue 33): the job's nodes and window against what was read about them.

Each scenario is a story whose answer is fixed by the story itself (which node broke, when, what the job did),
not by the code: a job dies on a faulty node, a job dies of a cluster-wide cause, a job dies of its own fault,
on Slurm and on EKS, plus the edges (a fault before the window, a warning only, nothing read, UNKNOWN).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hyperpod_debugger.domain.jobs import JobEvidence, JobNode, TrainingJob
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.remediation.culprits import diagnose, window

START = datetime(2026, 11, 30, 2, 40, tzinfo=UTC)
CRASH = datetime(2026, 11, 30, 3, 12, tzinfo=UTC)
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
NODES = {
    "ip-10-1-2-11": "i-0aaaaaaaaaaaaaa11",
    "ip-10-1-2-12": "i-0aaaaaaaaaaaaaa12",
    "ip-10-1-2-13": "i-0aaaaaaaaaaaaaa13",
    "ip-10-1-2-14": "i-0aaaaaaaaaaaaaa14",
}


def slurm_job(state: str = "FAILED", exit_code: str = "1:0", *, end: datetime | None = CRASH) -> TrainingJob:
    return TrainingJob(
        orchestrator="Slurm",
        job_id="4123",
        name="llama-70b-pretrain",
        owner="alice",
        state=state,
        exit_code=exit_code,
        reason="NonZeroExitCode" if state == "FAILED" else None,
        start=START,
        end=end,
        nodes=tuple(JobNode(name, iid) for name, iid in NODES.items()),
    )


def pytorch_job(notes: dict[str, tuple[str, ...]] | None = None, state: str = "Failed") -> TrainingJob:
    notes = notes or {}
    return TrainingJob(
        orchestrator="EKS",
        job_id="training/llama-70b",
        name="llama-70b",
        owner="training",
        state=state,
        exit_code="1",
        start=START,
        end=CRASH,
        nodes=tuple(
            JobNode(f"hyperpod-{iid}", iid, notes=notes.get(iid, ()), failed_here=bool(notes.get(iid)))
            for iid in NODES.values()
        ),
    )


def finding(
    iid: str | None,
    at: datetime,
    *,
    check: str = "probe.xid",
    tag: Tag = Tag.FAIL,
    message: str = "Xid 79 (GPU has fallen off the bus) on GPU 3",
    until: datetime | None = None,
    section: str = "G.1",
    **kw: object,
) -> JobEvidence:
    return JobEvidence(
        source=kw.pop("source", "finding"),  # type: ignore[arg-type]
        check=check,
        tag=tag,
        message=message,
        instance_id=iid,
        at=at,
        until=until,
        priority=Priority.P0 if tag is Tag.FAIL else Priority.P1,
        section=section,
        **kw,  # type: ignore[arg-type]
    )


SICK = NODES["ip-10-1-2-13"]


# --------------------------------------------------------------------------- a job that died on a faulty node


def test_a_slurm_job_that_died_on_a_node_with_an_xid_79_names_that_node():
    # GIVEN job 4123 failed at 03:12, and node 13 logged Xid 79 at 03:11 (a minute before the crash)
    xid = finding(SICK, CRASH - timedelta(minutes=1), next_step="reboot the node")
    other = finding("i-0bbbbbbbbbbbbbb99", CRASH, message="disk full on a node the job did not use", check="probe.disk")
    diagnosis = diagnose(slurm_job(), [xid, other], now=NOW)
    # THEN node 13 is the one likely culprit, the evidence placed 31 minutes into the job, with its next step
    assert diagnosis.kind == "node"
    assert [(c.node_name, c.strength) for c in diagnosis.culprits] == [("ip-10-1-2-13", "likely")]
    culprit = diagnosis.culprits[0]
    assert culprit.evidence[0].when == "2026-11-30 03:11:00 UTC, 31 min into the job"
    assert culprit.next_step == "reboot the node"
    assert "ip-10-1-2-13 (i-0aaaaaaaaaaaaaa13) likely ended the job: Xid 79" in diagnosis.conclusion
    assert not diagnosis.common


def test_a_node_fail_job_is_placed_on_the_node_hyperpod_reported_after_the_crash():
    # GIVEN Slurm ended the job NODE_FAIL, and HyperPod's event for node 12 came 6 minutes after the crash
    event = finding(
        NODES["ip-10-1-2-12"],
        CRASH + timedelta(minutes=6),
        check="hyperpod.event",
        message="Node i-0aaaaaaaaaaaaaa12 is unhealthy: NvidiaGpuXidError",
        source="hyperpod_event",
        instant=True,
    )
    diagnosis = diagnose(slurm_job("NODE_FAIL", "0:0"), [event], now=NOW)
    assert diagnosis.kind == "node" and [c.node_name for c in diagnosis.culprits] == ["ip-10-1-2-12"]
    assert diagnosis.culprits[0].evidence[0].when.endswith("6 min after the job ended (detection lags the fault)")


def test_a_pytorchjob_whose_worker_node_lost_its_gpu_names_that_node():
    # GIVEN the PyTorchJob failed; its worker on node 13 ended with exit 1, and the health agent saw Xid 48 there
    detection = finding(
        SICK,
        CRASH - timedelta(seconds=20),
        message="Xid 48 (double-bit ECC error)",
        source="health_agent",
        instant=True,
    )
    job = pytorch_job({SICK: ("pod llama-70b-worker-2 terminated: Error, exit 1",)})
    diagnosis = diagnose(job, [detection], now=NOW)
    assert diagnosis.kind == "node" and [c.instance_id for c in diagnosis.culprits] == [SICK]
    # the orchestrator's words about the culprit are with the culprit, not repeated as loose notes
    assert diagnosis.notes == ()


def test_a_fault_open_since_before_the_job_is_placed_through_the_job():
    # GIVEN a pending row remap on node 11, open since the day before and still open
    remap = finding(
        NODES["ip-10-1-2-11"], START - timedelta(hours=20), check="probe.gpu_remap", message="row remap pending"
    )
    diagnosis = diagnose(slurm_job(), [remap], now=NOW)
    assert [c.node_name for c in diagnosis.culprits] == ["ip-10-1-2-11"]
    assert diagnosis.culprits[0].evidence[0].when == (
        "open since 2026-11-29 06:40:00 UTC (20 h 0 min before the job started), through the job"
    )


def test_a_fault_resolved_before_the_job_started_does_not_count():
    healed = finding(SICK, START - timedelta(hours=5), until=START - timedelta(hours=4))
    late = finding(SICK, CRASH + timedelta(hours=3))  # long after the job's window closed
    diagnosis = diagnose(slurm_job(), [healed, late], now=NOW)
    assert diagnosis.culprits == () and diagnosis.kind == "own"


# --------------------------------------------------------------------------- a cluster-wide cause


def test_an_efa_security_group_problem_is_the_cause_common_to_every_node():
    # GIVEN the EFA security group stopped allowing its own traffic before the job started (cluster-wide)
    sg = finding(
        None,
        START - timedelta(hours=2),
        check="vpc.efa_security_group",
        message="security group sg-0123 does not allow all traffic to itself: EFA fails",
        section="A",
    )
    diagnosis = diagnose(slurm_job(), [sg], now=NOW)
    assert diagnosis.kind == "cluster" and diagnosis.culprits == ()
    assert "No single node stands out: the cluster had a problem" in diagnosis.conclusion
    assert [p.evidence.check for p in diagnosis.common] == ["vpc.efa_security_group"]


def test_a_problem_every_node_of_the_job_shows_is_common_not_one_nodes():
    # GIVEN every node of the PyTorchJob runs an older EFA installer than its group (the same check on all four)
    skew = [
        finding(iid, START - timedelta(days=2), check="probe.versions", tag=Tag.WARN, message="EFA 1.30 vs 1.34")
        for iid in NODES.values()
    ]
    diagnosis = diagnose(pytorch_job(), skew, now=NOW)
    assert diagnosis.kind == "cluster" and diagnosis.culprits == ()
    assert "all 4 of the job's nodes" in diagnosis.conclusion and len(diagnosis.common) == 1


# --------------------------------------------------------------------------- the job's own fault


def test_a_slurm_job_out_of_memory_with_nothing_on_its_nodes_is_its_own():
    diagnosis = diagnose(slurm_job("OUT_OF_MEMORY", "0:125"), [], now=NOW, read=["the findings history of 4 nodes"])
    assert diagnosis.kind == "own" and diagnosis.culprits == ()
    assert "it ran out of memory" in diagnosis.conclusion
    assert diagnosis.read == ("the findings history of 4 nodes",)


def test_a_pytorchjob_whose_container_was_oomkilled_is_its_own():
    job = pytorch_job({SICK: ("pod llama-70b-worker-2 terminated: OOMKilled, exit 137",)})
    diagnosis = diagnose(job, [], now=NOW)
    assert diagnosis.kind == "own" and "OOMKilled" in diagnosis.conclusion
    assert diagnosis.notes == ("hyperpod-i-0aaaaaaaaaaaaaa13: pod llama-70b-worker-2 terminated: OOMKilled, exit 137",)


def test_a_failed_job_with_only_a_warning_says_possible_and_blames_no_node():
    warn = finding(SICK, CRASH - timedelta(minutes=5), tag=Tag.WARN, check="probe.clock", message="clock offset 120 ms")
    diagnosis = diagnose(slurm_job("FAILED", "2:0"), [warn], now=NOW)
    assert diagnosis.kind == "own"
    assert [(c.node_name, c.strength) for c in diagnosis.culprits] == [("ip-10-1-2-13", "possible")]
    assert (
        "it exited with code 2:0" in diagnosis.conclusion
        and "possible, not shown to be the cause" in diagnosis.conclusion
    )


# --------------------------------------------------------------------------- nothing explains it; what could not be read


def test_a_node_fail_with_nothing_read_is_unexplained_and_says_what_could_not_be_read():
    unread = finding(SICK, CRASH, tag=Tag.UNKNOWN, check="probe.session", message="the SSM agent did not answer")
    job = slurm_job("NODE_FAIL", "0:0")
    job = replace(job, nodes=(*job.nodes, JobNode("ip-10-1-2-15")))  # a node the node list does not name
    diagnosis = diagnose(job, [unread], now=NOW, unknown=["HyperPod's events: AccessDenied"])
    assert diagnosis.kind == "unexplained" and diagnosis.culprits == ()
    assert diagnosis.unknown == (
        "HyperPod's events: AccessDenied",
        "node ip-10-1-2-15: its instance could not be resolved, so nothing about it was read",
        f"node {SICK}: probe.session could not be read (the SSM agent did not answer)",
    )


def test_evidence_without_a_time_cannot_be_placed_and_is_said():
    undated = JobEvidence(source="finding", check="probe.disk", tag=Tag.FAIL, message="disk full", instance_id=SICK)
    diagnosis = diagnose(slurm_job(), [undated], now=NOW)
    assert diagnosis.culprits == ()
    assert diagnosis.unknown == (
        f"node {SICK}: probe.disk has no time, so it cannot be placed in the job's window (disk full)",
    )


def test_a_running_job_with_nothing_wrong_is_said_to_be_running():
    diagnosis = diagnose(slurm_job("RUNNING", "0:0", end=None), [], now=NOW)
    assert diagnosis.kind == "running" and diagnosis.window_end == NOW


def test_the_window_opens_before_the_start_and_closes_after_the_end():
    start, end = window(slurm_job(), NOW)
    assert (start, end) == (START - timedelta(minutes=15), CRASH + timedelta(minutes=30))


def test_problems_that_cannot_end_a_running_job_blame_nothing():
    # GIVEN node 13's SSM agent is unreachable (§ K) and the cluster's lifecycle script failed on a new node (§ D)
    ssm = finding(SICK, CRASH, check="nodes.ssm", message="SSM agent not connected", section="K")
    lifecycle = finding(None, CRASH, check="cluster.lifecycle", message="lifecycle script failed", section="D")
    diagnosis = diagnose(slurm_job(), [ssm, lifecycle], now=NOW)
    # THEN neither is a culprit nor a common cause: the job failed of its own exit
    assert diagnosis.kind == "own" and diagnosis.culprits == () and diagnosis.common == ()
