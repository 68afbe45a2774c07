"""Classify HyperPod failure texts (cluster FailureMessage, event descriptions and metadata,
node status messages) into a cause and the runbook section that covers it.

These texts are free-form English written by the service, so matching them is unavoidable;
the rules are ordered, case-insensitive and tested against real published messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hyperpod_debugger.domain.model import Priority


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
# The newer Cluster Event families (HyperPod cluster events reference): patching, autoscaling, storage,
# access entries and ENI clean-up. Each has a cause of its own so alerts name the operation.
PATCH_ROLLBACK = Cause(
    "patch_rollback",
    "E",
    "patching rolled back",
    Priority.P1,
    "A software update (UpdateClusterSoftware) failed or tripped its bake-time alarms and HyperPod rolled "
    "the group back; nodes that could not roll back may be left in FailedMaintenance.",
)
PATCH_FAILED = Cause(
    "patch_failed",
    "E",
    "patching failed",
    Priority.P1,
    "A software update (UpdateClusterSoftware) of the group failed or could not be scheduled.",
)
PATCH_BLOCKED = Cause(
    "patch_blocked",
    "E",
    "patching skipped by a PodDisruptionBudget",
    Priority.P2,
    "The update skipped a node because evicting its pods would break a PodDisruptionBudget; the node "
    "keeps the old software until the budget allows it.",
)
SLURM_DRIFT = Cause(
    "slurm_drift",
    "H",
    "Slurm configuration drift",
    Priority.P1,
    "The Slurm configuration on the cluster no longer matches what HyperPod expects.",
)
AUTOSCALING = Cause(
    "autoscaling",
    "J",
    "autoscaling (Karpenter) failure",
    Priority.P1,
    "HyperPod could not set up or run autoscaling for the EKS cluster (Karpenter, its custom resources "
    "or the access policies it needs).",
)
STORAGE = Cause(
    "storage",
    "J",
    "FSx file system failure",
    Priority.P1,
    "Creating, updating or deleting the instance group's FSx file system failed.",
)
ACCESS_ENTRY = Cause(
    "access_entry",
    "B.1",
    "EKS access entry failure",
    Priority.P1,
    "HyperPod could not create or update the EKS access entries its nodes and service role need.",
)
ENI_CLEANUP = Cause(
    "eni_cleanup",
    "B.1",
    "ENI clean-up failure",
    Priority.P2,
    "Unused customer ENIs could not be deleted; they keep holding subnet addresses.",
)
KUBE_CONFIG = Cause(
    "kube_config",
    "F",
    "node labels or taints not applied",
    Priority.P2,
    "HyperPod could not update the node's Kubernetes labels or taints.",
)
OTHER = Cause(
    "other",
    "F",
    "unclassified failure",
    Priority.P1,
    "HyperPod reported a failure this tool does not classify; read the evidence.",
)

_RULES: tuple[tuple[re.Pattern[str], Cause], ...] = (
    # Specific operations first: their texts also contain words the generic rules below look for.
    (
        re.compile(r"baking period failed|auto-?rollback|rollback failed|failedmaintenance|initiating rollback", re.I),
        PATCH_ROLLBACK,
    ),
    (re.compile(r"skipped due to poddisruptionbudget", re.I), PATCH_BLOCKED),
    (re.compile(r"updateclustersoftware|update batch|root volume replacement", re.I), PATCH_FAILED),
    (re.compile(r"configuration drift", re.I), SLURM_DRIFT),
    (re.compile(r"autoscaling|karpenter|customresourcedefinition", re.I), AUTOSCALING),
    (re.compile(r"\bfsx\b", re.I), STORAGE),
    (re.compile(r"access entr(?:y|ies)", re.I), ACCESS_ENTRY),
    (re.compile(r"delete (?:unused )?customer enis?", re.I), ENI_CLEANUP),
    (re.compile(r"kubernetes config", re.I), KUBE_CONFIG),
    (re.compile(r"sufficient capacity|insufficient\s*instance\s*capacity|capacity reservation .*not", re.I), CAPACITY),
    (re.compile(r"no subnets? in the capacity|availability zone .*not supported", re.I), CAPACITY),
    (re.compile(r"efa health ?check", re.I), EFA),
    (re.compile(r"lifecycle script|lifecycleconfig|on_create", re.I), LIFECYCLE),
    (re.compile(r"customer eni|network configuration|network misconfiguration|bootstrap failed", re.I), NETWORK),
    (
        re.compile(
            r"hardware failure|instance replacement|reboot request|failed health check|deep health ?check", re.I
        ),
        HARDWARE,
    ),
    (re.compile(r"slurm", re.I), SLURM),
)


def classify(*texts: str | None) -> Cause:
    # Collapse whitespace: published messages are sometimes hard-wrapped mid-phrase.
    joined = " ".join(" ".join(t.split()) for t in texts if t)
    for pattern, cause in _RULES:
        if pattern.search(joined):
            return cause
    return OTHER
