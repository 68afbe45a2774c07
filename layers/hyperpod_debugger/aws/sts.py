"""STS: who are we (and do we have working credentials at all)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperpod_debugger.aws.errors import call

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients


def caller_account(clients: AwsClients) -> str:
    """The caller's account id. GetCallerIdentity needs no IAM permission, so a failure here
    means the credentials themselves are missing, expired or rejected."""
    raw = call(clients.client("sts"), "sts:GetCallerIdentity", "get_caller_identity")
    return str(raw.get("Account", ""))
