"""Runbook sections of ``references/node-diagnostics-detail.md`` and how findings link to them.

Every problem a check reports points at one of these ids. The ids, titles and anchors are a
contract with the runbook file: a test reads the file and fails when one of them is missing.
"""

from __future__ import annotations

import re
from functools import lru_cache

RUNBOOK_PATH = "references/node-diagnostics-detail.md"

#: section id -> heading title (the heading in the runbook is "<id> <title>").
SECTIONS: dict[str, str] = {
    "A": "EFA and security groups",
    "B": "VPC and routing",
    "B.1": "Subnets, security groups and addressing",
    "B.2": "VPC DNS attributes",
    "B.3": "Private subnets and default routes",
    "B.4": "VPC endpoints for isolated subnets",
    "B.5": "EKS and HyperPod network alignment",
    "C": "Capacity and Availability Zones",
    "D": "Lifecycle scripts",
    "E": "Software versions",
    "F": "Hardware faults and automatic recovery",
    "G": "GPUs and accelerators",
    "G.1": "NVIDIA GPUs",
    "G.1.a": "GPU memory row remapping",
    "G.1.b": "DCGM health",
    "G.1.c": "Fabric Manager on NVSwitch instances",
    "G.2": "Trainium and Inferentia",
    "H": "Slurm node management",
    "I": "Resource exhaustion",
    "I.1": "Fork failures and huge pages",
    "I.2": "Root volume space",
    "I.3": "Out-of-memory kills",
    "I.4": "Inode exhaustion",
    "I.5": "Clock synchronisation",
    "J": "Instance group configuration",
    "K": "Node access through SSM",
    "L": "Log collection",
    "M": "Container runtime",
    "N": "Kernel and system",
    "O": "CNI and pod networking",
}

#: section id -> what to do, in one line: an alert carries it so it helps without opening the runbook.
WHAT_TO_DO: dict[str, str] = {
    "A": "Give the EFA security group all-traffic rules to itself, inbound and outbound, through its template.",
    "B": "Check the cluster's subnets, routes and endpoints against HyperPod's VPC needs before acting on nodes.",
    "B.1": "Free or add addresses (a larger or an additional subnet) and make sure every named security group exists.",
    "B.2": "Turn on enableDnsSupport and enableDnsHostnames on the cluster's VPC, through the VPC's template.",
    "B.3": "Put the nodes in private subnets whose default route goes to a NAT gateway, not to an internet gateway.",
    "B.4": "Add the missing interface endpoints, and associate the S3 gateway endpoint with the subnets' route tables.",
    "B.5": "Let the EKS control plane and the HyperPod security groups reach each other on TCP 443.",
    "C": "Ask for capacity elsewhere (another AZ, a reservation or training plan), or lower the target count for now.",
    "D": "Find the first error in the lifecycle script's CloudWatch log, fix the script in S3, then update the group.",
    "E": "Compare the node's driver, CUDA, EFA and kernel versions with the cluster's AMI release, then update.",
    "F": "Follow the node's verdict: investigate, then reboot, and replace only when the fault returns.",
    "G": "Read the device error, drain the node and reboot it; replace it if the hardware fault comes back.",
    "G.1": "Read the Xid and nvidia-smi, drain the node and reboot it; replace it if the GPU fault comes back.",
    "G.1.a": "A pending row remap needs a GPU reset: drain the node and reboot it; replace it if remapping failed.",
    "G.1.b": "Run the DCGM diagnostic on the drained node; a failed hardware test means reboot, then replace.",
    "G.1.c": "Start nvidia-fabricmanager at the driver's version; if it will not stay up, drain and reboot the node.",
    "G.2": "Read neuron-ls and the Neuron runtime log; on a device error drain and reboot, replace if it recurs.",
    "H": "Read the node's Slurm reason (sinfo -R), fix slurmd or munge on it, then return it to service.",
    "I": "Find what ran out (disk, memory, processes, inodes) and free it; the node itself rarely needs a reboot.",
    "I.1": "Raise the process limit or free the huge pages, and fix the job that forks or reserves without bound.",
    "I.2": "Free the root volume (old images, logs, checkpoints) or move the data to instance storage or FSx.",
    "I.3": "Give the job more memory or a smaller batch: a workload killed for memory needs no node action.",
    "I.4": "Delete the many small files (caches, temporary files) that used up the file system's inodes.",
    "I.5": "Restart chrony and point it at the Amazon Time Sync Service (169.254.169.123).",
    "J": "Fix the instance group's settings (threads per core, volumes, lifecycle config) in the cluster template.",
    "K": "Restore Session Manager: the agent on the node, the IAM permissions, and the ssm and ssmmessages endpoints.",
    "L": "Restore log delivery: the CloudWatch agent, the logs endpoint and the execution role's logs permissions.",
    "M": "Read the container runtime's journal and restart it; reboot the node if it will not come back.",
    "N": "Read the kernel log around the panic, hang or lockup; reboot the node, and replace it if it recurs.",
    "O": "Fix aws-node (VPC CNI): its logs, the subnet's free addresses, its IAM role; until then pods get no network.",
}


def what_to_do(section: str | None) -> str | None:
    """The section's one-line "what to do", or its parent's (``G.1.a`` → ``G.1`` → ``G``)."""
    while section:
        if section in WHAT_TO_DO:
            return WHAT_TO_DO[section]
        section = section.rpartition(".")[0]
    return None


_SECTION_RE = re.compile(r"^[A-O](\.[0-9]+(\.[a-z])?)?$")


@lru_cache(maxsize=256)
def is_section(section: str) -> bool:
    return bool(_SECTION_RE.match(section)) and section in SECTIONS


@lru_cache(maxsize=256)
def anchor(section: str) -> str:
    """GitHub-style anchor of the section heading, e.g. ``G.1.a`` -> ``g1a-gpu-memory-row-remapping``."""
    heading = f"{section} {SECTIONS[section]}"
    slug = heading.strip().lower()
    slug = re.sub(r"[^\w\- ]", "", slug)
    return slug.replace(" ", "-")


def pointer(section: str) -> str:
    """The text pointer printed after a problem: ``references/node-diagnostics-detail.md § A``."""
    return f"{RUNBOOK_PATH} § {section}"


@lru_cache(maxsize=1024)
def link(section: str, base_url: str | None = None) -> str:
    """A clickable link to the section, relative to ``base_url`` when one is configured."""
    target = f"{RUNBOOK_PATH}#{anchor(section)}"
    if base_url:
        return f"{base_url.rstrip('/')}/{target}"
    return target
