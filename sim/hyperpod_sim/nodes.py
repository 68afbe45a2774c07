"""Simulated nodes behind the fake SSM service: each answers the probe command with the document
``probe.sh`` would print on it (see :mod:`hyperpod_sim.probe_docs`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from hyperpod_debugger.aws.ssm_types import session_target
from hyperpod_debugger.domain.catalog import spec_for
from hyperpod_debugger.probe.delivery import decode_command
from hyperpod_sim.fake_ssm import FakeSsm, NodeReply, marker_aware
from hyperpod_sim.probe_docs import node_document, to_json


def add_probe_node(
    ssm: FakeSsm,
    *,
    cluster_arn: str,
    group: str,
    instance_id: str,
    instance_type: str,
    hostname: str,
    now: datetime,
    orchestrator: str | None,
    controller: bool = False,
    faults: Iterable[str] = (),
    slurm_reply: str | None = None,
    jobs_reply: str | None = None,
) -> str:
    """Register a node that runs the probe (and, on a Slurm controller, the read-only Slurm query and the jobs
    command); any other command gets "command not found" (exit 127)."""
    spec = spec_for(instance_type)
    doc = node_document(
        hostname,
        now,
        gpus=(spec.gpus or 0) if spec else 0,
        efa_devices=(spec.efa or 0) if spec else 0,
        orchestrator=orchestrator,
        controller=controller,
        faults=faults,
    )
    body = to_json(doc)

    def respond(command: str) -> NodeReply:
        if slurm_reply is not None and "==HPD:ping==" in command:  # the read-only Slurm query
            return NodeReply(stdout=slurm_reply.encode(), stderr=b"", exit_code=0)
        if jobs_reply is not None and "==HPD:jobs_live==" in command:  # the read-only Slurm jobs command
            return NodeReply(stdout=jobs_reply.encode(), stderr=b"", exit_code=0)
        if decode_command(command) is None:
            return NodeReply(stdout=b"", stderr=b"bash: unexpected command\n", exit_code=127)
        return NodeReply(stdout=body.encode(), stderr=b"", exit_code=0)

    target = session_target(cluster_arn, group, instance_id)
    ssm.add_node(target, marker_aware(respond))
    return target
