"""The commands the monitor's pinned Session documents carry, by kind: probe.sh as it travels to the node, the
Slurm controller's read-only query, and its jobs. :mod:`hyperpod_debugger.aws.ssm_documents` wraps each in its
document (the stack creates them) and finds the document of a command; it learns the commands here. And the
runner that sends a command through Session Manager, through the document that carries it (the probe run and
the Slurm reads use it)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from hyperpod_debugger.aws.ssm_documents import KINDS, NO_DOCUMENTS, pinned_nonce
from hyperpod_debugger.aws.ssm_types import SessionError
from hyperpod_debugger.probe.delivery import probe_command

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.aws.ssm_documents import SessionDocuments
    from hyperpod_debugger.aws.ssm_types import CommandResult, Runner


def command_of(kind: str) -> str:
    """The command a pinned document of ``kind`` carries, from this package's own probe and query."""
    if kind == "probe":
        return probe_command()
    if kind == "slurm":
        from hyperpod_debugger.slurm.parse import slurm_query_command  # the Slurm parsers: loaded for Slurm only

        return slurm_query_command()
    if kind == "jobs":
        from hyperpod_debugger.slurm.jobs import jobs_command  # the Slurm jobs reader: loaded for a job only

        return jobs_command()
    raise ValueError(f"no pinned session document of kind {kind!r} (known: {', '.join(KINDS)})")


def ssm_runner(clients: AwsClients, region: str, timeout: float, documents: SessionDocuments = NO_DOCUMENTS) -> Runner:
    """Commands through Session Manager. With pinned ``documents`` a command runs only through the
    document that carries it; a command no document carries is refused before any call."""
    from hyperpod_debugger.aws import ssm_session

    run = partial(
        ssm_session.run_command,
        clients.client("ssm"),
        credentials=clients.credentials(),
        region=region,
        timeout=timeout,
    )
    if not documents:
        return run

    async def pinned(target: str, command: str) -> CommandResult:
        document = documents.for_command(command, command_of)
        if document is None:
            raise SessionError("DENIED", "no pinned session document carries this command: it is not run")
        return await run(target, command, document=document, nonce=pinned_nonce(command))

    return pinned
