"""Reading the Slurm controller through Session Manager: find it (group names only pick the
candidates), confirm it with ``scontrol ping``, and keep what it reported for the Slurm checks."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from hyperpod_debugger.aws.ssm_documents import NO_DOCUMENTS, SessionDocuments
from hyperpod_debugger.aws.ssm_types import CommandResult, SessionError, TargetError, session_target
from hyperpod_debugger.domain.observations import ApiFailure, Cluster, ClusterNode, Observed
from hyperpod_debugger.domain.orchestrators import SlurmController, SlurmObservation
from hyperpod_debugger.slurm.jobs import JOBS_KEYS, JobsRead, jobs_command, parse_jobs_output
from hyperpod_debugger.slurm.parse import controller_up, parse_query_output, slurm_query_command

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.aws.ssm_types import Runner

#: Group names that mark controller candidates; only ``scontrol ping`` confirms one.
_CANDIDATE_GROUP = re.compile(r"controller|head|master|login", re.I)
#: Candidates tried before giving up (each is one session).
MAX_CANDIDATES = 3
_OUTCOME_KIND = {"DENIED": "denied", "TIMEOUT": "timeout", "THROTTLED": "throttled", "UNREACHABLE": "endpoint"}


async def _awaited(call: Awaitable[CommandResult]) -> CommandResult:
    return await call


def candidates(nodes: Sequence[ClusterNode]) -> list[ClusterNode]:
    """Running nodes of controller-looking groups, controller/head first."""
    running = [n for n in nodes if n.status == "Running" and _CANDIDATE_GROUP.search(n.group)]
    return sorted(running, key=lambda n: ("login" in n.group.lower(), n.group, n.instance_id))


def node_instances(nodes: Sequence[ClusterNode]) -> dict[str, str]:
    """Slurm node name (the PrivateDnsHostname's first label, ``ip-10-1-2-3``) -> instance id."""
    return {n.slurm_name: n.instance_id for n in nodes if n.slurm_name}


def _ask(run: Runner, cluster: Cluster, node: ClusterNode, command: str) -> str | ApiFailure:
    """What ``node`` printed for ``command`` (a session through ``run``), or why it could not be asked."""
    try:
        target = session_target(cluster.arn, node.group, node.instance_id)
        result = asyncio.run(_awaited(run(target, command)))
    except TargetError as exc:
        return ApiFailure("ssm:StartSession", "error", str(exc))
    except SessionError as exc:
        kind = _OUTCOME_KIND.get(exc.outcome, "error")
        return ApiFailure("ssm:StartSession", kind, f"{node.instance_id}: {exc.message}")  # type: ignore[arg-type]
    return result.stdout.decode("utf-8", errors="replace")


def query_controller(
    clients: AwsClients,
    cluster: Cluster,
    nodes: Sequence[ClusterNode],
    *,
    runner_factory: Callable[[AwsClients, str, float, SessionDocuments], Runner],
    timeout: float,
    documents: SessionDocuments = NO_DOCUMENTS,
) -> Observed[SlurmObservation]:
    picks = candidates(nodes)[:MAX_CANDIDATES]
    if not picks:
        return Observed.skip("no Running node in a controller/head/login instance group to ask")
    run = runner_factory(clients, cluster.region, timeout, documents)
    command = slurm_query_command()
    mapping = node_instances(nodes)
    last_failure: ApiFailure | None = None
    first_answer: tuple[ClusterNode, dict[str, str]] | None = None
    for node in picks:
        answer = _ask(run, cluster, node, command)
        if isinstance(answer, ApiFailure):
            last_failure = answer
            continue
        outputs = parse_query_output(answer)
        if controller_up(outputs.get("ping", "")):
            controller = SlurmController(node.instance_id, node.group, "scontrol ping")
            return Observed.ok(SlurmObservation(controller, outputs, mapping))
        first_answer = first_answer or (node, outputs)
    if first_answer is not None:
        # Someone answered but no controller was UP: report what it said, marked as a group-name guess.
        node, outputs = first_answer
        return Observed.ok(
            SlurmObservation(SlurmController(node.instance_id, node.group, "group name"), outputs, mapping)
        )
    assert last_failure is not None
    return Observed.failed(last_failure)


def read_jobs(
    clients: AwsClients,
    cluster: Cluster,
    nodes: Sequence[ClusterNode],
    *,
    runner_factory: Callable[[AwsClients, str, float, SessionDocuments], Runner],
    timeout: float,
    documents: SessionDocuments = NO_DOCUMENTS,
) -> Observed[JobsRead]:
    """The jobs the controller holds and accounting's last days (:func:`hyperpod_debugger.slurm.jobs.jobs_command`),
    from the first controller candidate whose answer carries them."""
    picks = candidates(nodes)[:MAX_CANDIDATES]
    if not picks:
        return Observed.skip("no Running node in a controller/head/login instance group to ask")
    run = runner_factory(clients, cluster.region, timeout, documents)
    command = jobs_command()
    last_failure = ApiFailure("ssm:StartSession", "error", "no candidate answered")
    for node in picks:
        answer = _ask(run, cluster, node, command)
        if isinstance(answer, ApiFailure):
            last_failure = answer
            continue
        read = parse_jobs_output(answer)
        if read.live or read.history or len(read.errors) < len(JOBS_KEYS):
            return Observed.ok(read)
        last_failure = ApiFailure(
            "ssm:StartSession", "malformed", f"{node.instance_id}: {'; '.join(read.errors.values())}"
        )
    return Observed.failed(last_failure)
