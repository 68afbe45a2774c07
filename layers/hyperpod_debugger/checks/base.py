"""What every check shares: the run context, the check descriptor and a finding builder."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag
from hyperpod_debugger.domain.observations import ClusterObservation


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Inputs a check may need besides the observation. Checks never read the clock themselves."""

    now: datetime
    scope_node: str | None = None
    event_window: timedelta = timedelta(hours=24)
    log_window: timedelta = timedelta(days=7)
    #: hardware Xid codes seen this many times on one instance within the log window -> replace
    xid_repeat_threshold: int = 2


Observation = TypeVar("Observation")
Context = TypeVar("Context")


@dataclass(frozen=True, slots=True)
class Check(Generic[Observation, Context]):
    """A check: a stable id, its runbook section, a title and the pure function that runs it, over a
    cluster observation (``checks/``) or a node's probe document (``probe/``)."""

    id: str
    section: str
    title: str
    run: Callable[[Observation, Context], list[Finding]]

    def __post_init__(self) -> None:
        # a PASS points at the runbook section of what it verified: its builder looks the section up here
        CHECK_SECTIONS.setdefault(self.id, self.section)


#: check id → the runbook section of its check (filled as the checks are defined, at import)
CHECK_SECTIONS: dict[str, str] = {}


def finding(
    obs: ClusterObservation,
    check: str,
    tag: Tag,
    message: str,
    *,
    instance_id: str | None = None,
    instance_group: str | None = None,
    **fields: Any,
) -> Finding:
    """Build a finding with the cluster identity filled in from the observation."""
    identity = {
        "cluster_arn": obs.cluster.arn,
        "cluster_name": obs.cluster.name,
        "instance_id": instance_id,
        "instance_group": instance_group,
    }
    return make_finding(identity, check, tag, message, **fields)


def make_finding(
    identity: Mapping[str, str | None],
    check: str,
    tag: Tag,
    message: str,
    *,
    priority: Priority | None = None,
    section: str | None = None,
    evidence: list[str] | None = None,
    root_cause: str | None = None,
    suggested_commands: list[SuggestedCommand] | None = None,
    **extra: Any,
) -> Finding:
    """A finding for the cluster/node in ``identity`` (cluster_arn, cluster_name, instance_id, instance_group).

    A PASS without its own section points at its check's; a plain PASS (message and evidence only) is
    built from a template validated once per check, not validated again (a sweep builds ~12 a node)."""
    if tag is Tag.PASS:
        section = section or CHECK_SECTIONS.get(check)
        if priority is None and root_cause is None and not suggested_commands and not extra:
            passed = _passed(identity, check, section, message, evidence or [])
            if passed is not None:
                return passed
    return Finding(
        tag=tag,
        priority=priority,
        check=check,
        section=section,
        message=message,
        evidence=evidence or [],
        root_cause=root_cause,
        suggested_commands=suggested_commands or [],
        **identity,
        **extra,
    )


#: (check, section) → a validated PASS finding whose copies carry each node's message and evidence
_PASS_TEMPLATES: dict[tuple[str, str | None], Finding] = {}


def _passed(
    identity: Mapping[str, str | None], check: str, section: str | None, message: str, evidence: list[str]
) -> Finding | None:
    """The PASS finding as a copy of its check's template, or None when a field needs validating (an
    empty message, a value of the wrong type): the caller then builds it the validated way and gets the
    validator's error."""
    text = " ".join(message.split()) if type(message) is str else ""
    if not text:
        return None
    try:
        "".join(evidence)  # every line a string (a TypeError otherwise), checked in C
    except TypeError:
        return None
    for value in identity.values():
        if value is not None and type(value) is not str:
            return None
    template = _PASS_TEMPLATES.get((check, section))
    if template is None:
        # validated here, once: the check id's pattern, the section, the runbook link
        template = _PASS_TEMPLATES[(check, section)] = Finding(
            tag=Tag.PASS, check=check, section=section, message=check
        )
    return template.model_copy(
        update={"message": text, "evidence": list(evidence), "suggested_commands": [], "explains": [], **identity}
    )
