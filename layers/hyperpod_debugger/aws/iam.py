"""The IAM actions the adapters call: the one list the README's policy, ``iam-policy`` and the CDK
stack's roles are all built from.

Tests keep this list and the code in step twice over: a scan of the adapters' declared calls
(``tests/unit/test_contracts.py``), and a record of the calls the handlers really make on the
simulated account against what the synthesized roles grant (``tests/infrastructure``).
"""

from __future__ import annotations

import json

#: Every action an adapter in this package calls. A test keeps this list and the code in step.
READ_ONLY_ACTIONS: tuple[str, ...] = (
    "sts:GetCallerIdentity",
    "sagemaker:DescribeCluster",
    "sagemaker:ListClusters",
    "sagemaker:ListClusterNodes",
    "sagemaker:DescribeClusterNode",
    "sagemaker:ListClusterEvents",
    "sagemaker:DescribeClusterEvent",
    "sagemaker:ListTags",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
    "ec2:DescribeVpcAttribute",
    "ec2:DescribeRouteTables",
    "ec2:DescribeVpcEndpoints",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstanceTypeOfferings",
    "servicequotas:GetServiceQuota",
    "eks:DescribeCluster",
    "logs:DescribeLogGroups",
    "logs:FilterLogEvents",
    "logs:GetLogEvents",
)


#: Session Manager actions the on-node probe needs. StartSession opens a session to a node; it changes
#: nothing on the node (the probe itself is read-only), but it is not a describe call, so it has its own
#: statement that an operator can leave out to run the triage without probing.
SESSION_ACTIONS: tuple[str, ...] = (
    "ssm:StartSession",
    "ssm:TerminateSession",
    "ssmmessages:OpenDataChannel",
)


#: The findings table, as ``store/findings.py`` uses it. ``TransactWriteItems`` is not an IAM action: IAM
#: authorises each item of a transaction as its own action (the tests map one to the other: ``tests/iam_calls.py``).
STORE_ACTIONS: tuple[str, ...] = (
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:BatchWriteItem",
)

#: Actions that need no permission (AWS: "No permissions are required to perform this operation").
NO_PERMISSION_NEEDED: frozenset[str] = frozenset({"sts:GetCallerIdentity"})


def by_service(actions: tuple[str, ...]) -> dict[str, list[str]]:
    """``{"sagemaker": [...], "ec2": [...]}``, in the order given, without the actions that need no permission."""
    grouped: dict[str, list[str]] = {}
    for action in actions:
        if action not in NO_PERMISSION_NEEDED:
            grouped.setdefault(action.split(":", 1)[0], []).append(action)
    return grouped


def policy_document() -> dict:
    """An identity policy granting exactly the triage's read-only calls.

    Resources are ``*``: the describe/list calls of EC2 and several SageMaker list calls do
    not support resource-level scoping.
    """
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "HyperPodDebuggerReadOnly",
                "Effect": "Allow",
                "Action": sorted(a for a in READ_ONLY_ACTIONS if a not in NO_PERMISSION_NEEDED),
                "Resource": "*",
            },
            {
                "Sid": "HyperPodDebuggerProbeSessions",
                "Effect": "Allow",
                "Action": list(SESSION_ACTIONS),
                "Resource": "*",
            },
        ],
    }


def policy_json() -> str:
    return json.dumps(policy_document(), indent=2) + "\n"
