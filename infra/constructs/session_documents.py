"""Session Manager access for the functions that probe nodes: pinned documents and the narrowest grants
AWS documents for ``sagemaker-cluster:`` targets.

* Two ``Session`` documents (``NonInteractiveCommands``): the probe and the Slurm query, each with its
  command fixed and no parameter (``hyperpod_debugger.aws.ssm_documents``), tagged
  ``hyperpod-debugger:session-document=pinned``. CloudFormation names them; the functions learn the
  names from ``SESSION_DOCUMENTS``.
* ``ssm:StartSession``: allowed with ``ssm:SessionDocumentAccessCheck`` (so a call naming no document
  is checked against the default shell document too), and denied for every document, account-owned
  or AWS-owned, that does not carry the tag. AWS documents no resource ARN for a ``sagemaker-cluster:``
  target, so the target stays ``*``: a compromised function can open sessions, but can run only the
  read-only probe and query in them.
* ``ssm:TerminateSession``: only sessions the function itself started (the ``aws:ssmmessages:session-id``
  tag equals the caller's ``aws:userid``, AWS's documented pattern).
* ``ssmmessages:OpenDataChannel``: ``*`` (the service authorization reference lists no resource type).

With ``-c sessionDocuments=aws`` no document is created and sessions use AWS-StartNonInteractiveCommand,
whose command the caller chooses; only the grants above without the document Deny remain. Sources and
the decision: references/decisions.md (2026-12-01).
"""

from __future__ import annotations

from typing import Literal

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from hyperpod_debugger.aws import ssm_documents
from hyperpod_debugger.probe.pinned import command_of
from infra.constructs.python_function import PythonFunction

Mode = Literal["pinned", "aws"]
MODES: tuple[Mode, ...] = ("pinned", "aws")


class SessionAccess(Construct):
    """Exposes `documents` (kind -> CfnDocument; empty in ``aws`` mode), `mode` and :meth:`grant`."""

    def __init__(self, scope: Construct, construct_id: str, *, mode: Mode = "pinned") -> None:
        super().__init__(scope, construct_id)
        if mode not in MODES:
            raise ValueError(f"sessionDocuments must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.documents: dict[str, ssm.CfnDocument] = {}
        if mode == "pinned":
            for kind in ssm_documents.KINDS:
                self.documents[kind] = ssm.CfnDocument(
                    self,
                    f"{kind.title()}Document",
                    content=ssm_documents.document_content(kind, command_of(kind)),
                    document_type="Session",
                    document_format="JSON",
                    update_method="Replace",
                    tags=[cdk.CfnTag(key=ssm_documents.TAG_KEY, value=ssm_documents.TAG_VALUE)],
                )

    def statements(self) -> list[iam.PolicyStatement]:
        stack = cdk.Stack.of(self)
        statements = [
            iam.PolicyStatement(
                sid="StartProbeSessions",
                actions=["ssm:StartSession"],
                resources=["*"],
                conditions={"BoolIfExists": {"ssm:SessionDocumentAccessCheck": "true"}},
            ),
            iam.PolicyStatement(
                sid="EndOwnSessions",
                actions=["ssm:TerminateSession"],
                resources=[stack.format_arn(service="ssm", resource="session", resource_name="*")],
                conditions={"StringLike": {"ssm:resourceTag/aws:ssmmessages:session-id": ["${aws:userid}"]}},
            ),
            iam.PolicyStatement(sid="SessionDataChannel", actions=["ssmmessages:OpenDataChannel"], resources=["*"]),
        ]
        if self.mode == "pinned":
            statements.append(
                iam.PolicyStatement(
                    sid="OnlyPinnedDocuments",
                    effect=iam.Effect.DENY,
                    actions=["ssm:StartSession"],
                    resources=[
                        f"arn:{stack.partition}:ssm:*:*:document/*",  # the account's own documents
                        f"arn:{stack.partition}:ssm:*::document/*",  # AWS-owned documents
                    ],
                    conditions={
                        "StringNotEquals": {f"aws:ResourceTag/{ssm_documents.TAG_KEY}": ssm_documents.TAG_VALUE}
                    },
                )
            )
        return statements

    @property
    def setting(self) -> str | None:
        """``SESSION_DOCUMENTS`` for the functions: ``{"probe": <name>, "slurm": <name>}``."""
        if not self.documents:
            return None
        return cdk.Stack.of(self).to_json_string({kind: doc.ref for kind, doc in self.documents.items()})

    def grant(self, function: PythonFunction) -> None:
        """Let ``function`` open probe sessions, with the pinned documents only (in ``pinned`` mode)."""
        function.policy.add_statements(*self.statements())
        if self.setting is not None:
            function.function.add_environment("SESSION_DOCUMENTS", self.setting)
