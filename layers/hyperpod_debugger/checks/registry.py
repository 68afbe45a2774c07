"""The ordered list of cluster-level checks and the runner that turns their outcomes into
findings and coverage.

A check that could not see its input is *unknown*, never passed; a check that does not apply
is *skipped* with the reason. Access denied on any API becomes one ``Missing IAM permission
<action>`` finding per action, pointing at the section of the check it blocked.
"""

from __future__ import annotations

import logging
from typing import Any

from hyperpod_debugger.checks import (
    capacity,
    cluster,
    config,
    eks,
    events,
    kubernetes,
    logs,
    network,
    nodes,
    slurm,
    vpc,
)
from hyperpod_debugger.checks.base import Check, CheckContext
from hyperpod_debugger.domain.model import CheckCoverage, CheckStatus, Finding, Priority, Tag
from hyperpod_debugger.domain.observations import ClusterObservation, NotApplicable, Unobservable
from hyperpod_debugger.domain.sections import link

LOG = logging.getLogger(__name__)

ALL_CHECKS: tuple[Check, ...] = (
    *cluster.CHECKS,
    *nodes.CHECKS,
    *events.CHECKS,
    *network.CHECKS,
    *vpc.CHECKS,
    *eks.CHECKS,
    *capacity.CHECKS,
    *config.CHECKS,
    *logs.CHECKS,
    *kubernetes.CHECKS,
    *slurm.CHECKS,
)

#: Where a missing permission points when no check claimed it (every action we call is listed).
ACTION_SECTIONS: dict[str, str] = {
    "sagemaker:DescribeCluster": "F",
    "sagemaker:ListClusters": "F",
    "sagemaker:ListClusterNodes": "F",
    "sagemaker:DescribeClusterNode": "F",
    "sagemaker:ListClusterEvents": "F",
    "sagemaker:DescribeClusterEvent": "F",
    "sagemaker:ListTags": "J",
    "ec2:DescribeSecurityGroups": "A",
    "ec2:DescribeSubnets": "B.1",
    "ec2:DescribeVpcs": "B.2",
    "ec2:DescribeVpcAttribute": "B.2",
    "ec2:DescribeRouteTables": "B.3",
    "ec2:DescribeVpcEndpoints": "B.4",
    "ec2:DescribeNetworkInterfaces": "B.1",
    "ec2:DescribeInstanceTypes": "J",
    "ec2:DescribeInstanceTypeOfferings": "C",
    "servicequotas:GetServiceQuota": "B.1",
    "eks:DescribeCluster": "B.5",
    "logs:DescribeLogGroups": "L",
    "logs:FilterLogEvents": "D",
    "logs:GetLogEvents": "D",
    "sts:GetCallerIdentity": "K",
}


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


def run_checks(
    obs: ClusterObservation, ctx: CheckContext, checks: tuple[Check, ...] = ALL_CHECKS
) -> tuple[list[Finding], list[CheckCoverage]]:
    identity: dict[str, str | None] = {"cluster_arn": obs.cluster.arn, "cluster_name": obs.cluster.name}
    findings, coverage, denied_by = execute(checks, obs, ctx, identity, ctx.scope_node)
    return _permission_findings(obs, denied_by) + findings, coverage


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


def _permission_findings(obs: ClusterObservation, denied_by: dict[str, Check]) -> list[Finding]:
    actions = dict.fromkeys(
        [*denied_by, *(f.action for f in obs.failures if f.kind == "denied" and is_iam_action(f.action))]
    )
    out = []
    for action in actions:
        check = denied_by.get(action)
        blocked = f" (blocked: {check.title.lower()})" if check else ""
        out.append(
            Finding(
                tag=Tag.WARN,
                priority=Priority.P1,
                check="iam.permission",
                section=check.section if check else ACTION_SECTIONS.get(action, "K"),
                message=f"Missing IAM permission {action}{blocked}",
                cluster_arn=obs.cluster.arn,
                cluster_name=obs.cluster.name,
                evidence=[next(f.message for f in obs.failures if f.action == action and f.kind == "denied")]
                if any(f.action == action and f.kind == "denied" for f in obs.failures)
                else [],
                root_cause=f"The identity running the triage is not allowed to call {action}.",
            )
        )
    return out
