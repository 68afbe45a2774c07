"""cfn-lint, CloudFormation's own linter, on the synthesized templates: no error and no warning, except
W3005 (a DependsOn that a GetAtt already implies), which CDK itself writes for every function."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from aws_cdk.assertions import Template
from cfnlint.api import lint

#: What CDK emits on its own and we accept.
ACCEPTED = {"W3005"}


def findings(template: Mapping[str, Any]) -> list[str]:
    matches = lint(json.dumps(template), regions=["us-west-2", "us-east-1"])
    return sorted(f"{m.rule.id} {m.message}" for m in matches if m.rule.id[0] in "EW" and m.rule.id not in ACCEPTED)


def test_the_default_template_lints_clean(template: Template):
    assert findings(template.to_json()) == []


def test_the_every_setting_template_lints_clean(every_setting: Template):
    assert findings(every_setting.to_json()) == []


@pytest.mark.parametrize(
    ("action", "rule"),
    [
        ("dynamodb:TransactWriteItems", "W3037"),  # what an earlier version granted: not an IAM action
        ("sagemaker:DescribeClusterEvents", "W3037"),  # a misspelling
    ],
)
def test_the_linter_catches_actions_iam_does_not_know(action, rule):
    template = {
        "Resources": {
            "Policy": {
                "Type": "AWS::IAM::ManagedPolicy",
                "Properties": {
                    "PolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [{"Effect": "Allow", "Action": [action], "Resource": "*"}],
                    }
                },
            }
        }
    }
    assert any(f.startswith(rule) for f in findings(template))
