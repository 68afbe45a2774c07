"""The IAM actions an SDK call needs, for the tests that record the calls the code really makes and
hold them against the policy (:mod:`hyperpod_debugger.aws.iam`) and the synthesized roles."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hyperpod_debugger.aws.iam import NO_PERMISSION_NEEDED

#: IAM authorises each item of a DynamoDB transaction as its own action.
_TRANSACT_ITEM_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
    "Get": "dynamodb:GetItem",
}


def iam_actions(action: str, params: Mapping[str, Any] | None = None) -> set[str]:
    """The IAM actions one API call needs (an SDK operation is not always an IAM action)."""
    if action in NO_PERMISSION_NEEDED:
        return set()
    if action in ("dynamodb:TransactWriteItems", "dynamodb:TransactGetItems"):
        items = (params or {}).get("TransactItems") or []
        return {_TRANSACT_ITEM_ACTIONS[kind] for item in items for kind in item if kind in _TRANSACT_ITEM_ACTIONS}
    return {action}
