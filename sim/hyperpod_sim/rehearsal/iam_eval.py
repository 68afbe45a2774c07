"""IAM's evaluation of identity policies for one request, as the IAM User Guide states it
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html): an explicit
``Deny`` that matches wins; otherwise an ``Allow`` that matches allows; otherwise the request is denied.

A statement matches when its action, its resource and every one of its conditions match:

* ``Action``/``NotAction``: ``*`` and ``?`` wildcards, case-insensitive.
* ``Resource``/``NotResource``: ``*`` and ``?`` wildcards, case-sensitive, with policy variables
  (``${aws:userid}``; ``${*}``, ``${?}``, ``${$}`` for the literal characters; ``${key, 'default'}``).
  A variable whose key the request lacks matches nothing.
* ``Condition``: every operator and every key (AND), any of a key's values (OR). Operators: ``String*``
  (``Equals``, ``NotEquals``, ``EqualsIgnoreCase``, ``NotEqualsIgnoreCase``, ``Like``, ``NotLike``), ``Arn*``
  (``Equals``, ``Like``, ``NotEquals``, ``NotLike``), ``Bool``, ``Numeric*`` and ``Null``, each with
  ``IfExists`` and the ``ForAllValues:``/``ForAnyValue:`` set prefixes. Condition key names are
  case-insensitive. A key the request lacks: the condition is false, but true for a negated operator
  (``...Not...``), for ``...IfExists`` and for ``ForAllValues:``; ``ForAnyValue:`` is false ("Condition
  operators", IAM User Guide). An operator this module does not know raises :class:`Unsupported`
  rather than guessing.

Only identity policies are evaluated: no resource policy, permissions boundary, session policy or SCP.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: (policy name, policy document)
Policy = tuple[str, Mapping[str, Any]]


class Unsupported(ValueError):
    """A policy element this evaluator does not implement (it refuses to guess)."""


@dataclass(frozen=True)
class Request:
    """One authorisation: an action on one resource, with the condition keys the request carries
    (names in any case; each with its values, a multivalued key such as ``dynamodb:LeadingKeys`` too)."""

    action: str
    resource: str
    context: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def values(self, key: str) -> tuple[str, ...] | None:
        lowered = key.lower()
        for name, values in self.context.items():
            if name.lower() == lowered:
                return tuple(values)
        return None


@dataclass(frozen=True)
class Decision:
    allowed: bool
    #: why, in words: the Deny that matched, the Allow that allowed, or what each near miss lacked
    reason: str
    #: the statements that decided (``policy/Sid`` or ``policy/#index``)
    statements: tuple[str, ...] = ()


# --------------------------------------------------------------------------- wildcards and variables

_TOKEN = re.compile(r"\$\{([^}]*)\}|\*|\?|.", re.DOTALL)


def _pattern(text: str, request: Request, *, wildcards: bool) -> re.Pattern[str] | None:
    """A regular expression for a policy string; None when one of its variables has no value."""
    out = []
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if match.group(1) is not None:
            name = match.group(1).strip()
            if name in ("*", "?", "$"):
                out.append(re.escape(name))
                continue
            key, _, default = name.partition(",")
            values = request.values(key.strip())
            if values:
                out.append(re.escape(values[0]))
            elif default.strip():
                out.append(re.escape(default.strip().strip("'")))
            else:
                return None
        elif wildcards and token == "*":
            out.append(".*")
        elif wildcards and token == "?":
            out.append(".")
        else:
            out.append(re.escape(token))
    return re.compile("".join(out), re.DOTALL)


def _matches(text: str, value: str, request: Request, *, wildcards: bool, ignore_case: bool = False) -> bool:
    compiled = _pattern(text, request, wildcards=wildcards)
    if compiled is None:
        return False
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    return re.fullmatch(compiled.pattern, value, flags) is not None


def _like(pattern: str, value: str, request: Request, *, ignore_case: bool = False) -> bool:
    return _matches(pattern, value, request, wildcards=True, ignore_case=ignore_case)


def _equals(expected: str, value: str, request: Request, *, ignore_case: bool = False) -> bool:
    return _matches(expected, value, request, wildcards=False, ignore_case=ignore_case)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# --------------------------------------------------------------------------- conditions


def _numeric(op: str, value: str, expected: str) -> bool:
    try:
        a, b = float(value), float(expected)
    except ValueError:
        return False
    return {
        "NumericEquals": a == b,
        "NumericNotEquals": a == b,  # negated by the caller
        "NumericLessThan": a < b,
        "NumericLessThanEquals": a <= b,
        "NumericGreaterThan": a > b,
        "NumericGreaterThanEquals": a >= b,
    }[op]


_POSITIVE = {
    "StringEquals": "StringEquals",
    "StringNotEquals": "StringEquals",
    "StringEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringLike": "StringLike",
    "StringNotLike": "StringLike",
    "ArnEquals": "ArnLike",  # the guide: ArnEquals and ArnLike behave the same
    "ArnLike": "ArnLike",
    "ArnNotEquals": "ArnLike",
    "ArnNotLike": "ArnLike",
    "Bool": "Bool",
    "NumericEquals": "NumericEquals",
    "NumericNotEquals": "NumericEquals",
    "NumericLessThan": "NumericLessThan",
    "NumericLessThanEquals": "NumericLessThanEquals",
    "NumericGreaterThan": "NumericGreaterThan",
    "NumericGreaterThanEquals": "NumericGreaterThanEquals",
}
_NEGATED = {
    "StringNotEquals",
    "StringNotEqualsIgnoreCase",
    "StringNotLike",
    "ArnNotEquals",
    "ArnNotLike",
    "NumericNotEquals",
}


def _one(op: str, value: str, expected: str, request: Request) -> bool:
    """Whether one request value meets one policy value under the positive form of ``op``."""
    if op == "StringEquals":
        return _equals(expected, value, request)
    if op == "StringEqualsIgnoreCase":
        return _equals(expected, value, request, ignore_case=True)
    if op == "StringLike":
        return _like(expected, value, request)
    if op == "ArnLike":
        return _like(expected, value, request)
    if op == "Bool":
        return value.lower() == expected.lower()
    return _numeric(op, value, expected)


def _condition(operator: str, key: str, expected_raw: Any, request: Request) -> tuple[bool, str]:
    set_op, _, op = operator.rpartition(":")
    if set_op not in ("", "ForAllValues", "ForAnyValue"):
        raise Unsupported(f"condition set operator {set_op!r}")
    if_exists = op.endswith("IfExists")
    base = op.removesuffix("IfExists")
    expected = [_text(e) for e in _as_list(expected_raw)]
    values = request.values(key)
    shown = f"{operator} {key} {expected}: the request has {list(values) if values is not None else 'no value'}"
    if base == "Null":
        if set_op or if_exists:
            raise Unsupported(f"condition operator {operator!r}")
        absent = not values
        return any((e.lower() == "true") == absent for e in expected), shown
    positive = _POSITIVE.get(base)
    if positive is None:
        raise Unsupported(f"condition operator {operator!r}")
    negated = base in _NEGATED

    def single(value: str) -> bool:
        hit = any(_one(positive, value, e, request) for e in expected)
        return not hit if negated else hit

    if values is None:
        if set_op == "ForAllValues":
            return True, shown
        if set_op == "ForAnyValue":
            return False, shown
        return (if_exists or negated), shown
    if set_op == "ForAllValues":
        return all(single(v) for v in values), shown
    if set_op == "ForAnyValue":
        return any(single(v) for v in values), shown
    hit = any(_one(positive, v, e, request) for v in values for e in expected)
    return (not hit if negated else hit), shown


def _conditions(block: Mapping[str, Any], request: Request) -> tuple[bool, list[str]]:
    failed = []
    for operator, keys in block.items():
        for key, expected in keys.items():
            ok, shown = _condition(operator, key, expected, request)
            if not ok:
                failed.append(shown)
    return not failed, failed


# --------------------------------------------------------------------------- statements


def _action_matches(statement: Mapping[str, Any], action: str) -> bool:
    if "Action" in statement:
        return any(_like(str(p), action, Request(action, ""), ignore_case=True) for p in _as_list(statement["Action"]))
    if "NotAction" in statement:
        return not any(
            _like(str(p), action, Request(action, ""), ignore_case=True) for p in _as_list(statement["NotAction"])
        )
    raise Unsupported("a statement without Action or NotAction")


def _resource_matches(statement: Mapping[str, Any], request: Request) -> bool:
    if "Resource" in statement:
        return any(_like(str(p), request.resource, request) for p in _as_list(statement["Resource"]))
    if "NotResource" in statement:
        return not any(_like(str(p), request.resource, request) for p in _as_list(statement["NotResource"]))
    raise Unsupported("a statement without Resource or NotResource")


def statements(policies: Iterable[Policy]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(label, statement)`` of every statement of ``policies``; the label is ``policy/Sid`` or ``policy/#i``."""
    out = []
    for name, document in policies:
        for index, statement in enumerate(_as_list(document.get("Statement", []))):
            out.append((f"{name}/{statement.get('Sid') or f'#{index}'}", statement))
    return out


def evaluate(policies: Iterable[Policy], request: Request) -> Decision:
    """Whether the identity ``policies`` allow ``request``."""
    allows: list[str] = []
    denies: list[str] = []
    misses: list[str] = []
    for label, statement in statements(policies):
        effect = statement.get("Effect")
        if effect not in ("Allow", "Deny"):
            raise Unsupported(f"{label}: Effect {effect!r}")
        if "Principal" in statement or "NotPrincipal" in statement:
            raise Unsupported(f"{label}: a Principal in an identity policy")
        if not _action_matches(statement, request.action):
            continue
        if not _resource_matches(statement, request):
            if effect == "Allow":
                misses.append(f"{label} allows the action on other resources")
            continue
        ok, failed = _conditions(statement.get("Condition", {}), request)
        if not ok:
            if effect == "Allow":
                misses.append(f"{label}'s condition fails: {'; '.join(failed)}")
            continue
        (allows if effect == "Allow" else denies).append(label)
    if denies:
        return Decision(False, f"explicitly denied by {', '.join(denies)}", tuple(denies))
    if allows:
        return Decision(True, f"allowed by {', '.join(allows)}", tuple(allows))
    if misses:
        return Decision(False, "no statement allows it: " + " | ".join(misses))
    return Decision(False, "no statement allows it: no statement names the action")
