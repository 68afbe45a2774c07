"""``hyperpod-debugger demo``: triage two simulated clusters, no AWS account, no network."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_debugger.domain.model import TriageReport
from hyperpod_debugger.job_diagnosis import JobRequest, diagnose_job
from hyperpod_debugger.report.job import render_text as render_job
from hyperpod_debugger.report.text import render_text
from hyperpod_debugger.triage import TriageRequest, run_triage
from hyperpod_sim import job_scenarios
from hyperpod_sim.fake_k8s import FakeKubernetes
from hyperpod_sim.fake_ssm import FakeSsm
from hyperpod_sim.monitor_demo import DEMO_PROBE, monitor_walkthrough
from hyperpod_sim.scenarios import (
    EKS_CLUSTER,
    REGION,
    Demo,
    register_kubernetes,
    register_probe_nodes,
    seed_demo,
)
from hyperpod_sim.server import simulated_aws


@contextmanager
def _simulated_account(now: datetime) -> Iterator[tuple[AwsClients, Demo]]:
    """The demo account: moto in-process, a fake Session Manager agent per node, a fake Kubernetes API."""
    with simulated_account_and_ssm(now) as (clients, demo, _):
        yield clients, demo


@contextmanager
def simulated_account_and_ssm(now: datetime) -> Iterator[tuple[AwsClients, Demo, FakeSsm]]:
    """The demo account, and its fake Session Manager service (to inject faults, read what it received)."""
    with simulated_world(now) as world:
        yield world.clients, world.demo, world.ssm


@dataclass(frozen=True)
class World:
    """The demo account and the doubles beside moto: Session Manager and the EKS cluster's Kubernetes API."""

    clients: AwsClients
    demo: Demo
    ssm: FakeSsm
    kubernetes: FakeKubernetes


@contextmanager
def simulated_world(now: datetime) -> Iterator[World]:
    with (
        simulated_aws(),
        FakeSsm(start_session_rate=DEMO_PROBE.rate) as ssm,
        FakeKubernetes(cluster_name=f"{EKS_CLUSTER}-eks") as kubernetes,
    ):
        saved = os.environ.get("AWS_ENDPOINT_URL_SSM")
        os.environ["AWS_ENDPOINT_URL_SSM"] = ssm.endpoint_url  # SSM to the fake agent, the rest to moto
        try:
            clients = AwsClients(REGION, max_attempts=2)
            demo = seed_demo(clients, now)
            register_probe_nodes(ssm, demo, now)
            register_kubernetes(kubernetes, demo)
            yield World(clients, demo, ssm, kubernetes)
        finally:
            if saved is None:
                os.environ.pop("AWS_ENDPOINT_URL_SSM", None)
            else:
                os.environ["AWS_ENDPOINT_URL_SSM"] = saved


def _triage_both(demo: Demo, now: datetime, probe: bool) -> list[TriageReport]:
    return [
        run_triage(TriageRequest(cluster=c.name, region=REGION, now=now, probe=probe, probe_options=DEMO_PROBE))
        for c in (demo.eks, demo.slurm)
    ]


def job_walkthrough(clients: AwsClients, ssm: FakeSsm, now: datetime) -> str:
    """A training job that died on a faulty node, diagnosed from its Slurm job id (``hyperpod-debugger job``),
    on a third simulated cluster seeded beside the first two."""
    world = job_scenarios.seed_jobs(clients, now)
    job_scenarios.register_job_nodes(ssm, world, now)
    job = world.jobs[0]
    run = diagnose_job(
        JobRequest(cluster=job.cluster, region=REGION, job=job.job_id, now=now, probe_options=DEMO_PROBE), clients
    )
    intro = (
        f"An ML engineer's job died overnight. They know its id, not its nodes:\n"
        f"  hyperpod-debugger job --cluster {job.cluster} --job {job.job_id}\n\n"
    )
    return intro + (render_job(run.diagnosis) if run.diagnosis else f"{run.error}\n")


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def run_demo(json_output: bool = False, colour: bool = False, verbose: bool = False) -> int:
    """The demo, printed as it runs: each cluster's report as soon as its triage ends, then each step of the
    monitor as it happens."""
    now = datetime.now(UTC)
    if not json_output:
        _write("Starting a simulated AWS account (two HyperPod clusters, no network) …\n\n")
    with simulated_account_and_ssm(now) as (clients, demo, ssm):
        if json_output:
            reports = _triage_both(demo, now, probe=True)
            sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in reports], indent=2) + "\n")
            return 0
        for index, cluster in enumerate((demo.eks, demo.slurm)):
            if index:
                _write("\n" + "=" * 100 + "\n\n")
            request = TriageRequest(cluster=cluster.name, region=REGION, now=now, probe=True, probe_options=DEMO_PROBE)
            _write(render_text(run_triage(request), colour=colour, verbose=verbose))
        _write("\n" + "=" * 100 + "\n\n")
        monitor_walkthrough(clients, demo, now, write=_write)
        _write("\n" + "=" * 100 + "\n\n")
        _write(job_walkthrough(clients, ssm, now))
    sys.stdout.write(
        "\nThis was a simulated account (moto, in-process) with a fake Session Manager agent on each node.\n"
        "Run the same triage against a real cluster with:\n"
        "  hyperpod-debugger triage --cluster <name-or-arn> --region <region>\n"
    )
    return 0
