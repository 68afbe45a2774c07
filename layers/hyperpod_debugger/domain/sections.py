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
