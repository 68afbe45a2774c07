"""A synthesized CloudFormation template read as CloudFormation reads it: parameters, rules, conditions,
dependencies and intrinsic functions.

:class:`Template` loads ``<stack>.template.json`` and its asset manifest from a cloud assembly;
:meth:`Template.order` gives the resources in an order that creates every dependency first (``Ref``,
``Fn::GetAtt``, ``${…}`` in ``Fn::Sub`` and ``DependsOn``), and :class:`Resolver` turns a property value
into what CloudFormation would hand the service, given the physical ids and attributes of the resources
created so far. An intrinsic it does not know, or a reference to nothing, raises :class:`TemplateError`
naming the resource and the path: a template this cannot read is a finding, not a silent gap.
"""

from __future__ import annotations

import base64
import json
import pathlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The value CloudFormation gives ``Fn::Sub``'s ``${AWS::…}`` and ``Ref`` of pseudo parameters.
PSEUDO = ("AWS::AccountId", "AWS::Region", "AWS::Partition", "AWS::URLSuffix", "AWS::StackName", "AWS::StackId")
NO_VALUE = "AWS::NoValue"
_SUB = re.compile(r"\$\{([^}!][^}]*)\}")


class TemplateError(ValueError):
    """The template asks for something CloudFormation would refuse, or this reader does not know."""


@dataclass(frozen=True)
class Asset:
    """One file asset of the cloud assembly: where it lies, where ``cdk deploy`` publishes it."""

    path: pathlib.Path
    packaging: str
    bucket: str
    key: str


@dataclass
class Template:
    name: str
    body: dict[str, Any]
    assets: dict[str, Asset]

    @classmethod
    def load(cls, cdk_out: pathlib.Path, stack: str) -> Template:
        body = json.loads((cdk_out / f"{stack}.template.json").read_text())
        manifest = json.loads((cdk_out / f"{stack}.assets.json").read_text())
        assets = {}
        for asset_hash, entry in manifest.get("files", {}).items():
            (destination,) = entry["destinations"].values()
            assets[asset_hash] = Asset(
                path=cdk_out / entry["source"]["path"],
                packaging=entry["source"].get("packaging", "file"),
                bucket=destination["bucketName"],
                key=destination["objectKey"],
            )
        return cls(stack, body, assets)

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.body["Resources"]

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: r for k, r in self.resources.items() if r["Type"] == resource_type}

    def order(self) -> list[str]:
        """Every resource after the resources it depends on (CloudFormation's creation order, serialised)."""
        needs = {name: _dependencies(resource) & set(self.resources) for name, resource in self.resources.items()}
        done: list[str] = []
        placed: set[str] = set()
        while len(done) < len(needs):
            ready = sorted(n for n, deps in needs.items() if n not in placed and deps <= placed)
            if not ready:
                stuck = sorted(n for n in needs if n not in placed)
                raise TemplateError(f"circular dependency among {stuck}")
            done.extend(ready)
            placed.update(ready)
        return done


def _dependencies(value: Any) -> set[str]:
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if set(node) == {"Ref"} and isinstance(node["Ref"], str):
                found.add(node["Ref"])
            elif set(node) == {"Fn::GetAtt"}:
                target = node["Fn::GetAtt"]
                found.add(target[0] if isinstance(target, list) else str(target).split(".", 1)[0])
            elif set(node) == {"Fn::Sub"}:
                text = node["Fn::Sub"] if isinstance(node["Fn::Sub"], str) else node["Fn::Sub"][0]
                found.update(m.split(".", 1)[0] for m in _SUB.findall(text))
                if isinstance(node["Fn::Sub"], list):
                    walk(node["Fn::Sub"][1])
            else:
                for key, child in node.items():
                    if key == "DependsOn":
                        found.update([child] if isinstance(child, str) else child)
                    else:
                        walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(value)
    return found


@dataclass
class Resolver:
    """Intrinsic functions against the stack created so far.

    ``refs`` holds each created resource's ``Ref`` value, ``attributes`` its ``Fn::GetAtt`` values;
    ``pseudo`` the pseudo parameters; ``parameters`` the template parameters' values."""

    pseudo: dict[str, str]
    parameters: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, bool] = field(default_factory=dict)
    refs: dict[str, Any] = field(default_factory=dict)
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)
    mappings: dict[str, Any] = field(default_factory=dict)

    def resolve(self, value: Any, where: str = "") -> Any:
        if isinstance(value, list):
            items = [self.resolve(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return [v for v in items if v is not _DROP]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            function = _FUNCTIONS.get(key)
            if function is not None:
                return function(self, arg, where)
            if key.startswith("Fn::"):
                raise TemplateError(f"{where}: intrinsic {key} is not supported by the rehearsal")
        out = {k: self.resolve(v, f"{where}.{k}") for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not _DROP}

    def ref(self, name: str, where: str) -> Any:
        if name == NO_VALUE:
            return _DROP
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        if name in self.refs:
            return self.refs[name]
        raise TemplateError(f"{where}: Ref {name} names nothing created before it")

    def get_att(self, name: str, attribute: str, where: str) -> Any:
        try:
            return self.attributes[name][attribute]
        except KeyError:
            raise TemplateError(f"{where}: Fn::GetAtt {name}.{attribute} is not known") from None

    def condition(self, name: str, where: str) -> bool:
        if name not in self.conditions:
            raise TemplateError(f"{where}: condition {name} is not defined")
        return self.conditions[name]


class _Drop:
    def __repr__(self) -> str:
        return "AWS::NoValue"


_DROP: Any = _Drop()


def _sub(resolver: Resolver, arg: Any, where: str) -> str:
    text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], resolver.resolve(arg[1], where))

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in variables:
            return str(variables[name])
        if "." in name and name not in resolver.pseudo:
            resource, attribute = name.split(".", 1)
            return str(resolver.get_att(resource, attribute, where))
        return str(resolver.ref(name, where))

    return _SUB.sub(value, text).replace("${!", "${")


def _get_att(resolver: Resolver, arg: Any, where: str) -> Any:
    name, attribute = arg if isinstance(arg, list) else str(arg).split(".", 1)
    return resolver.get_att(name, resolver.resolve(attribute, where), where)


def _join(resolver: Resolver, arg: Any, where: str) -> str:
    delimiter, parts = arg
    return str(delimiter).join(str(p) for p in resolver.resolve(parts, where))


def _select(resolver: Resolver, arg: Any, where: str) -> Any:
    index, items = resolver.resolve(arg, where)
    return items[int(index)]


def _split(resolver: Resolver, arg: Any, where: str) -> list[str]:
    delimiter, text = resolver.resolve(arg, where)
    return str(text).split(delimiter)


def _if(resolver: Resolver, arg: Any, where: str) -> Any:
    name, yes, no = arg
    return resolver.resolve(yes if resolver.condition(name, where) else no, where)


def _equals(resolver: Resolver, arg: Any, where: str) -> bool:
    left, right = resolver.resolve(arg, where)
    return bool(left == right)


def _contains(resolver: Resolver, arg: Any, where: str) -> bool:
    items, item = resolver.resolve(arg, where)
    return item in items


def _find_in_map(resolver: Resolver, arg: Any, where: str) -> Any:
    name, first, second = resolver.resolve(arg, where)
    try:
        return resolver.mappings[name][first][second]
    except KeyError:
        raise TemplateError(f"{where}: Fn::FindInMap {name}/{first}/{second} is not in the template") from None


_FUNCTIONS: Mapping[str, Callable[[Resolver, Any, str], Any]] = {
    "Ref": lambda r, a, w: r.ref(a, w),
    "Fn::GetAtt": _get_att,
    "Fn::Sub": _sub,
    "Fn::Join": _join,
    "Fn::Select": _select,
    "Fn::Split": _split,
    "Fn::If": _if,
    "Fn::Equals": _equals,
    "Fn::Not": lambda r, a, w: not r.resolve(a, w)[0],
    "Fn::And": lambda r, a, w: all(r.resolve(a, w)),
    "Fn::Or": lambda r, a, w: any(r.resolve(a, w)),
    "Fn::Contains": _contains,
    "Condition": lambda r, a, w: r.condition(a, w),
    "Fn::Base64": lambda r, a, w: base64.b64encode(str(r.resolve(a, w)).encode()).decode(),
    "Fn::FindInMap": _find_in_map,
    "Fn::GetAZs": lambda r, a, w: [f"{r.pseudo['AWS::Region']}{z}" for z in "abc"],
}


def check_rules(template: Template, resolver: Resolver) -> list[str]:
    """The template's ``Rules`` assertions (CDK's bootstrap-version check among them); the failed ones' text."""
    failed = []
    for name, rule in template.body.get("Rules", {}).items():
        if "RuleCondition" in rule and not resolver.resolve(rule["RuleCondition"], f"Rules.{name}"):
            continue
        for assertion in rule.get("Assertions", []):
            if not resolver.resolve(assertion["Assert"], f"Rules.{name}"):
                failed.append(f"{name}: {assertion.get('AssertDescription', 'assertion failed')}")
    return failed


def evaluate_conditions(template: Template, resolver: Resolver) -> None:
    pending = dict(template.body.get("Conditions", {}))
    for _ in range(len(pending) + 1):
        for name, expression in list(pending.items()):
            try:
                resolver.conditions[name] = bool(resolver.resolve(expression, f"Conditions.{name}"))
            except TemplateError:
                continue  # it names a condition not evaluated yet
            del pending[name]
    if pending:
        raise TemplateError(f"conditions that cannot be evaluated: {sorted(pending)}")
