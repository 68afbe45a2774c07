"""Infrastructure-as-code ownership, read from resource tags, and the drift note it implies.

CloudFormation (and so CDK, SAM, eksctl) stamps every resource it creates with
``aws:cloudformation:stack-name``/``stack-id``; Pulumi and Terraform do not tag by themselves,
but teams commonly add tags that say so (``pulumi:project``, ``ManagedBy=terraform``, …). When
a tag tells us the owner we name it; when the tags say nothing we ask the operator to confirm
before running a command that changes configuration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hyperpod_debugger.domain.commands import IAC_WARNING


@dataclass(frozen=True, slots=True)
class Ownership:
    tool: str  # CloudFormation | CDK | Terraform | Pulumi
    stack: str | None
    evidence: str  # the tag that told us, "key=value"


_CFN_STACK = "aws:cloudformation:stack-name"
_CFN_STACK_ID = "aws:cloudformation:stack-id"
_MANAGED_BY_KEYS = re.compile(r"^(managed[-_]?by|managedby|provisioner|provisioned[-_]?by|iac|tool)$", re.I)
_TERRAFORM_KEYS = re.compile(r"^(terraform|tf[-_:]?(workspace|module|stack|project)|terraform[-_:].+)$", re.I)


def detect_owner(tags: dict[str, str]) -> Ownership | None:
    """The IaC tool (and stack) that owns a resource, from its tags; None when the tags say nothing."""
    if _CFN_STACK in tags or _CFN_STACK_ID in tags:
        stack = tags.get(_CFN_STACK) or tags[_CFN_STACK_ID].split("/")[1 if "/" in tags[_CFN_STACK_ID] else 0]
        tool = "CDK" if any(k.startswith("aws-cdk:") for k in tags) else "CloudFormation"
        key = _CFN_STACK if _CFN_STACK in tags else _CFN_STACK_ID
        return Ownership(tool, stack, f"{key}={tags[key]}")
    for key, value in tags.items():
        if key.startswith("pulumi:"):
            pulumi_stack = tags.get("pulumi:stack") or tags.get("pulumi:project")
            return Ownership("Pulumi", pulumi_stack, f"{key}={value}")
    for key, value in tags.items():
        if _TERRAFORM_KEYS.match(key):
            return Ownership("Terraform", tags.get("terraform:workspace") or None, f"{key}={value}")
        if _MANAGED_BY_KEYS.match(key):
            lowered = value.lower()
            for tool in ("terraform", "pulumi", "cloudformation", "cdk", "opentofu"):
                if tool in lowered:
                    name = {"cdk": "CDK", "cloudformation": "CloudFormation", "opentofu": "Terraform"}.get(
                        tool, tool.capitalize()
                    )
                    return Ownership(name, None, f"{key}={value}")
    return None


def drift_note(resource: str, tags: dict[str, str] | None) -> str:
    """The IaC note of a configuration change on ``resource``.

    ``tags`` is None when we could not read them, ``{}`` when the resource has none.
    """
    if tags is None:
        return IAC_WARNING
    owner = detect_owner(tags)
    if owner is None:
        return (
            f"No infrastructure-as-code tags found on {resource}. Confirm it is not managed by "
            "CloudFormation, CDK, Terraform or Pulumi before running this; if it is, change the template, "
            "then deploy: a direct change drifts from the template and the next deployment may revert it."
        )
    stack = f" stack '{owner.stack}'" if owner.stack else ""
    return (
        f"{resource} is managed by {owner.tool}{stack} (tag {owner.evidence}): change the template, then "
        "deploy. Running this command directly drifts from the template and the next deployment may revert "
        "it; if you must apply it now, record the drift and reconcile the template afterwards."
    )
