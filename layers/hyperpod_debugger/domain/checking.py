"""How any check runs, cluster-level (``checks/``) or on a node's probe document (``probe/``): the check
descriptor, the finding builder that fills a PASS's runbook section, and the runner that turns each check's
outcome into findings and coverage.

A check that could not see its input is *unknown*, never passed; a check that does not apply is *skipped*
with the reason; a check that raises is reported as an internal error of that check, never a crash of the run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from hyperpod_debugger.domain.model import CheckCoverage, CheckStatus, Finding, Priority, SuggestedCommand, Tag
from hyperpod_debugger.domain.observations import NotApplicable, Unobservable
from hyperpod_debugger.domain.sections import link

LOG = logging.getLogger(__name__)

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


def execute(
    checks: tuple[Check, ...],
    obs: Any,
    ctx: Any,
    identity: dict[str, str | None],
    scope_node: str | None = None,
) -> tuple[list[Finding], list[CheckCoverage], dict[str, Check]]:
    """Run checks over any observation: findings, coverage, and the checks blocked by a denied
    action (by IAM action). ``identity`` fills the cluster/node fields of the findings the runner
    itself writes (could-not-check, internal error)."""
    findings: list[Finding] = []
    coverage: list[CheckCoverage] = []
    denied_by: dict[str, Check] = {}
    for check in checks:
        try:
            produced = check.run(obs, ctx)
        except NotApplicable as exc:
            coverage.append(_skipped(check.id, str(exc)))
            continue
        except Unobservable as exc:
            coverage.append(CheckCoverage(check=check.id, status=CheckStatus.UNKNOWN, reason=exc.failure.describe()))
            if exc.failure.kind == "denied" and is_iam_action(exc.failure.action):
                denied_by.setdefault(exc.failure.action, check)
            else:
                findings.append(_could_not_check(identity, check, exc))
            continue
        except Exception as exc:  # noqa: BLE001 - outermost boundary of one check: report, never crash the run
            LOG.exception("check %s raised", check.id)
            coverage.append(
                CheckCoverage(check=check.id, status=CheckStatus.UNKNOWN, reason=f"internal error: {exc!r}")
            )
            findings.append(
                Finding(
                    tag=Tag.UNKNOWN,
                    priority=Priority.P2,
                    check=check.id,
                    section=check.section,
                    message=f"{check.title}: internal error in this check ({type(exc).__name__}); result unknown",
                    evidence=[repr(exc)],
                    **identity,
                )
            )
            continue
        if scope_node:
            # --node focuses the run: findings about other nodes are left out; cluster-wide ones stay.
            produced = [f for f in produced if f.instance_id in (None, scope_node)]
        partial = unrouted = False
        for f in produced:
            if f.tag is Tag.UNKNOWN:
                partial = True
            elif f.tag is Tag.PASS and f.section is None:
                unrouted = True
        if unrouted and check.section:
            # a PASS points at the runbook section of what it verified (problems carry their own already);
            # the finding builders do this already, a finding built by hand gets it here, with its link
            produced = [
                f.model_copy(update={"section": check.section, "runbook": link(check.section)})
                if f.tag is Tag.PASS and f.section is None and f.check == check.id
                else f
                for f in produced
            ]
        findings.extend(produced)
        coverage.append(_ran(check.id, partial))
    return findings, coverage, denied_by


#: (check id, partial) → its "ran" coverage record: frozen, so every run shares one
_RAN: dict[tuple[str, bool], CheckCoverage] = {}


#: (check id, reason) → its "skipped" record; reasons are few per check (a bound keeps odd ones out)
_SKIPPED: dict[tuple[str, str], CheckCoverage] = {}
_SKIPPED_KEPT = 2048


def _skipped(check: str, reason: str) -> CheckCoverage:
    record = _SKIPPED.get((check, reason))
    if record is None:
        record = CheckCoverage(check=check, status=CheckStatus.SKIPPED, reason=reason)
        if len(_SKIPPED) < _SKIPPED_KEPT:
            _SKIPPED[(check, reason)] = record
    return record


def _ran(check: str, partial: bool) -> CheckCoverage:
    record = _RAN.get((check, partial))
    if record is None:
        record = _RAN[(check, partial)] = CheckCoverage(
            check=check, status=CheckStatus.RAN, reason="some inputs could not be read" if partial else None
        )
    return record


#: IAM service prefixes of the actions the collectors call.
_IAM_SERVICES = frozenset({"sagemaker", "ec2", "eks", "logs", "servicequotas", "sts", "ssm", "ssmmessages"})


def is_iam_action(action: str) -> bool:
    """IAM actions get a "Missing IAM permission" finding; Kubernetes RBAC and access-entry denials
    (``kubernetes:…``) are not IAM and are reported as the check that could not look."""
    return action.split(":", 1)[0] in _IAM_SERVICES


def _could_not_check(identity: dict[str, str | None], check: Check, exc: Unobservable) -> Finding:
    # We did not look, so we say so; priority P1 because "could not verify" must not read as healthy.
    return Finding(
        tag=Tag.UNKNOWN,
        priority=Priority.P1,
        check=check.id,
        section=check.section,
        message=f"Could not check {check.title.lower()}: {exc.failure.describe()}",
        evidence=[exc.failure.message] if exc.failure.message else [],
        **identity,
    )
