"""The single Lambda factory: every function gets the same runtime, logging, tracing and its own role.

IAM convention (decision log): inline `PolicyStatement`s only, never `grant_*` helpers, so every action a
function may call is visible here and in the synthesized template. Each function gets its own role with
the read-only HyperPod set plus the statements its caller passes for its own table/topic/secret/queue.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from hyperpod_debugger.aws import iam as declared
from infra.constants import METRICS_NAMESPACE, REPO_ROOT, SERVICE_NAME
from infra.layer import PYTHON_VERSION

# The function asset is the repository root filtered down to functions/ (no bundling, no Docker); the
# core comes from the layer, and the simulator (sim/) never reaches AWS. It carries the runtime's bytecode
# (`python -m infra.layer functions`, checked against the source) and no other interpreter's.
CODE_EXCLUDES = [
    "*",
    ".*",
    "!functions",
    "!functions/**",
    "**/.*",
    "**/*.pyc",
    f"!functions/**/__pycache__/*.cpython-{PYTHON_VERSION.replace('.', '')}.pyc",
    "**/*.egg-info",
    "**/*.md",
]


#: Statement ids of the read-only set, by IAM service prefix; a service the adapters start to call
#: without a line here fails the synth (so nobody forgets to grant it).
_READ_SIDS = {
    "sagemaker": "HyperPodRead",
    "ec2": "NetworkAndEksRead",
    "eks": "NetworkAndEksRead",
    "logs": "ClusterLogsRead",
    "servicequotas": "QuotaRead",
}


def read_only_statements() -> list[iam.PolicyStatement]:
    """The read-only set the adapters declare (``hyperpod_debugger.aws.iam``, the list ``iam-policy``
    prints), one statement per kind. Session Manager access comes from ``SessionAccess.grant``."""
    grouped: dict[str, list[str]] = {}
    for service, actions in declared.by_service(declared.READ_ONLY_ACTIONS).items():
        if service not in _READ_SIDS:
            raise ValueError(f"the adapters call {service} ({', '.join(actions)}): add a statement id to _READ_SIDS")
        grouped.setdefault(_READ_SIDS[service], []).extend(actions)
    return [iam.PolicyStatement(sid=sid, actions=actions, resources=["*"]) for sid, actions in grouped.items()]


class PythonFunction(Construct):
    """A Python 3.12 / ARM64 Lambda with JSON logs, X-Ray, a retained log group and Powertools env."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: str,
        layer: lambda_.ILayerVersion,
        statements: Sequence[iam.PolicyStatement] = (),
        read_only: bool = True,
        environment: dict[str, str] | None = None,
        timeout: cdk.Duration | None = None,
        memory_size: int = 512,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention, removal_policy=cdk.RemovalPolicy.RETAIN)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{construct_id}: read-only HyperPod monitor function",
        )
        policy_statements = [
            iam.PolicyStatement(
                sid="OwnLogGroup",
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[self.log_group.log_group_arn],
            ),
            # X-Ray write is added by `tracing=ACTIVE` itself (the role's default policy).
        ]
        if read_only:
            policy_statements.extend(read_only_statements())
        policy_statements.extend(statements)
        self.policy = iam.Policy(self, "Policy", statements=policy_statements)
        self.role.attach_inline_policy(self.policy)

        self.function = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.ARM_64,
            handler=handler,
            code=lambda_.Code.from_asset(str(REPO_ROOT), exclude=CODE_EXCLUDES),
            layers=[layer],
            role=self.role,
            timeout=timeout or cdk.Duration.minutes(5),
            memory_size=memory_size,
            tracing=lambda_.Tracing.ACTIVE,
            logging_format=lambda_.LoggingFormat.JSON,
            log_group=self.log_group,
            reserved_concurrent_executions=reserved_concurrency,
            environment={
                "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                "POWERTOOLS_LOG_LEVEL": "INFO",
                "POWERTOOLS_LOGGER_LOG_EVENT": "false",
                **(environment or {}),
            },
        )
        # The role's inline policy must exist before the function can be invoked.
        self.function.node.add_dependency(self.policy)
