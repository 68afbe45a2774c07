"""IaC ownership from tags."""

from __future__ import annotations

import pytest

from hyperpod_debugger.remediation.iac import detect_owner, drift_note


@pytest.mark.parametrize(
    ("tags", "tool", "stack"),
    [
        ({"aws:cloudformation:stack-name": "net", "aws:cloudformation:logical-id": "Sg"}, "CloudFormation", "net"),
        (
            {"aws:cloudformation:stack-id": "arn:aws:cloudformation:us-west-2:1:stack/hp-net/abc"},
            "CloudFormation",
            "hp-net",
        ),
        ({"aws:cloudformation:stack-name": "app", "aws-cdk:subnet-name": "Private"}, "CDK", "app"),
        ({"pulumi:project": "infra", "pulumi:stack": "prod"}, "Pulumi", "prod"),
        ({"ManagedBy": "Terraform"}, "Terraform", None),
        ({"managed-by": "opentofu"}, "Terraform", None),
        ({"terraform": "true"}, "Terraform", None),
    ],
)
def test_owners_are_recognised(tags, tool, stack):
    owner = detect_owner(tags)
    assert owner is not None and (owner.tool, owner.stack) == (tool, stack)


@pytest.mark.parametrize("tags", [{}, {"Name": "hp-sg", "team": "ml"}, {"ManagedBy": "hand"}])
def test_unrelated_tags_say_nothing(tags):
    assert detect_owner(tags) is None


def test_notes():
    assert "stack 'net'" in drift_note("sg-1", {"aws:cloudformation:stack-name": "net"})
    assert drift_note("sg-1", {}).startswith("No infrastructure-as-code tags found on sg-1")
    assert "managed as code" in drift_note("sg-1", None)
