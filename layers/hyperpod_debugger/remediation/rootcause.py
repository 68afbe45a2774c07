"""One root cause, said once: findings of different checks that one fault explains are linked to it.

Pure. Each rule names a cause-and-effect the runbook documents, between findings of one report:

- a group short of its target size, and the insufficient-capacity events of that group (§ C);
- a node in Failure, or a Cluster Event, for a lifecycle-script failure, and the lifecycle log that says
  why the script failed on that node (§ D);
- a lifecycle script that could not reach Amazon S3, and the S3 gateway endpoint missing from the isolated
  subnets' route tables, or missing altogether (§ B.4);
- a Slurm node DOWN and not responding, and slurmd found dead on that node by its probe (§ H);
- GPUs missing from nvidia-smi, and an Xid 79 (fallen off the bus) on that node (§ G.1).

An effect records its root cause (``caused_by``, followed to the end of the chain); a cause lists what it
explains (``explains``). Nothing is dropped: the effect keeps its evidence and commands, and the report
prints it under its cause instead of as a problem of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from hyperpod_debugger.domain.model import Finding

_INSUFFICIENT = re.compile(r"insufficient capacity", re.I)
_LIFECYCLE = re.compile(r"lifecycle script", re.I)
_S3_UNREACHABLE = re.compile(r"could not reach Amazon S3", re.I)
_S3_GATEWAY = re.compile(r"^S3 gateway endpoint \S+ is not associated|required VPC endpoint\(s\):.*\bs3\b", re.I)
_SLURM_DOWN = re.compile(r"\bis down and not responding\b")
_SLURMD_DEAD = re.compile(r"^slurmd is not running\b")
_MISSING_GPUS = re.compile(r"^\d+ of \d+ GPUs visible")
_XID_79 = re.compile(r"^Xid 79\b")

Rule = Callable[[list[Finding]], Iterator[tuple[int, int]]]


def _problems(findings: list[Finding], check: str, pattern: re.Pattern[str] | None = None) -> Iterator[int]:
    for i, f in enumerate(findings):
        if f.is_problem and f.check == check and (pattern is None or pattern.search(f.message)):
            yield i


def _capacity(findings: list[Finding]) -> Iterator[tuple[int, int]]:
    for effect in _problems(findings, "cluster.instance_groups"):
        group = findings[effect].instance_group
        for cause in _problems(findings, "cluster.events", _INSUFFICIENT):
            if group and findings[cause].instance_group == group:
                yield effect, cause
                break


def _lifecycle(findings: list[Finding]) -> Iterator[tuple[int, int]]:
    logs = {findings[i].instance_id: i for i in _problems(findings, "logs.lifecycle") if findings[i].instance_id}
    for check in ("nodes.status", "cluster.events"):
        for effect in _problems(findings, check, _LIFECYCLE):
            cause = logs.get(findings[effect].instance_id)
            if cause is not None:
                yield effect, cause


def _s3(findings: list[Finding]) -> Iterator[tuple[int, int]]:
    causes = list(_problems(findings, "vpc.endpoints", _S3_GATEWAY))
    if causes:
        for effect in _problems(findings, "logs.lifecycle", _S3_UNREACHABLE):
            yield effect, causes[0]


def _same_node(effect_check: str, effect: re.Pattern[str], cause_check: str, cause: re.Pattern[str]) -> Rule:
    def rule(findings: list[Finding]) -> Iterator[tuple[int, int]]:
        causes = {findings[i].instance_id: i for i in _problems(findings, cause_check, cause)}
        for i in _problems(findings, effect_check, effect):
            if findings[i].instance_id in causes:
                yield i, causes[findings[i].instance_id]

    return rule


RULES: tuple[Rule, ...] = (
    _capacity,
    _lifecycle,
    _s3,
    _same_node("slurm.nodes", _SLURM_DOWN, "probe.services", _SLURMD_DEAD),
    _same_node("probe.gpu_count", _MISSING_GPUS, "probe.xid", _XID_79),
)


def reference(f: Finding) -> str:
    """How another finding names this one: its message and section."""
    return f"{f.message} (§ {f.section})" if f.section else f.message


def root_causes(findings: list[Finding]) -> dict[int, int]:
    """Index of each effect → index of its root cause (the end of the chain of :data:`RULES`); a finding
    that nothing explains is not a key."""
    direct: dict[int, int] = {}
    for rule in RULES:
        for effect, cause in rule(findings):
            if effect != cause:
                direct.setdefault(effect, cause)

    def root(i: int) -> int:
        seen = {i}
        while i in direct and direct[i] not in seen:
            i = direct[i]
            seen.add(i)
        return i

    return {effect: root(effect) for effect in direct}


def link_causes(findings: list[Finding]) -> list[Finding]:
    """The findings with ``caused_by`` / ``explains`` set from :data:`RULES` (recomputed from scratch)."""
    roots = root_causes(findings)
    explains: dict[int, list[str]] = {}
    for effect, cause in sorted(roots.items()):
        explains.setdefault(cause, []).append(reference(findings[effect]))
    out = []
    for i, f in enumerate(findings):
        caused_by = reference(findings[roots[i]]) if i in roots else None
        if caused_by == f.caused_by and explains.get(i, []) == f.explains:
            out.append(f)
            continue
        out.append(f.model_copy(update={"caused_by": caused_by, "explains": explains.get(i, [])}))
    return out
