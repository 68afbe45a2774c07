"""The read-only IAM actions the collectors call; the README's policy is generated from this."""

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
                "Action": sorted(a for a in READ_ONLY_ACTIONS if a != "sts:GetCallerIdentity"),
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
