"""The commands the monitor's pinned Session documents carry, by kind: probe.sh as it travels to the node, and
the Slurm controller's read-only query. :mod:`hyperpod_debugger.aws.ssm_documents` wraps each in its document
(the stack creates them) and finds the document of a command; it learns the commands here."""

from __future__ import annotations

from hyperpod_debugger.aws.ssm_documents import KINDS
from hyperpod_debugger.probe.delivery import probe_command


def command_of(kind: str) -> str:
    """The command a pinned document of ``kind`` carries, from this package's own probe and query."""
    if kind == "probe":
        return probe_command()
    if kind == "slurm":
        from hyperpod_debugger.slurm.parse import slurm_query_command  # the Slurm parsers: loaded for Slurm only

        return slurm_query_command()
    raise ValueError(f"no pinned session document of kind {kind!r} (known: {', '.join(KINDS)})")
