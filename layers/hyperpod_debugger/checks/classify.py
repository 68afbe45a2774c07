"""Classify HyperPod failure texts (cluster FailureMessage, event descriptions and metadata,
node status messages) into a cause and the runbook section that covers it.

These texts are free-form English written by the service, so matching them is unavoidable;
the rules are ordered, case-insensitive and tested against real published messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hyperpod_debugger.model import Priority


@dataclass(frozen=True, slots=True)
class Cause:
    key: str
    section: str
    label: str
    priority: Priority
    root_cause: str


CAPACITY = Cause(
    "capacity",
    "C",
    "insufficient capacity",
    Priority.P1,
    "EC2 had no capacity for the instance type in the Availability Zones of the group's subnets.",
)
LIFECYCLE = Cause(
    "lifecycle",
    "D",
    "lifecycle script failure",
    Priority.P1,
    "The on-create lifecycle script failed or did not finish; its log stream says why.",
)
EFA = Cause(
    "efa",
    "A",
    "EFA health check failure",
    Priority.P0,
    "Nodes could not exchange EFA traffic, most often because the security group lacks "
    "self-referencing all-traffic rules.",
)
NETWORK = Cause(
    "network",
    "B.1",
    "network configuration failure",
    Priority.P1,
    "HyperPod could not attach the node to the customer VPC (subnet, security group or ENI).",
)
HARDWARE = Cause(
    "hardware",
    "F",
    "hardware failure",
    Priority.P1,
    "The instance failed on the host; HyperPod's recovery reboots or replaces it.",
)
SLURM = Cause(
    "slurm",
    "H",
    "Slurm configuration problem",
    Priority.P1,
    "The Slurm controller or configuration reported a problem.",
)
OTHER = Cause(
    "other",
    "F",
    "unclassified failure",
    Priority.P1,
    "HyperPod reported a failure this tool does not classify; read the evidence.",
)

_RULES: tuple[tuple[re.Pattern[str], Cause], ...] = (
    (re.compile(r"sufficient capacity|insufficient\s*instance\s*capacity|capacity reservation .*not", re.I), CAPACITY),
    (re.compile(r"no subnets? in the capacity|availability zone .*not supported", re.I), CAPACITY),
    (re.compile(r"efa health ?check", re.I), EFA),
    (re.compile(r"lifecycle script|lifecycleconfig|on_create", re.I), LIFECYCLE),
    (re.compile(r"customer eni|network configuration|network misconfiguration|bootstrap failed", re.I), NETWORK),
    (re.compile(r"hardware failure|instance replacement|failed health check|deep health ?check", re.I), HARDWARE),
    (re.compile(r"slurm", re.I), SLURM),
)


def classify(*texts: str | None) -> Cause:
    # Collapse whitespace: published messages are sometimes hard-wrapped mid-phrase.
    joined = " ".join(" ".join(t.split()) for t in texts if t)
    for pattern, cause in _RULES:
        if pattern.search(joined):
            return cause
    return OTHER
