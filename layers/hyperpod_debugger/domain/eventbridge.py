"""HyperPod's events on EventBridge: where their fields live, which of them deserve a triage, and the
rule patterns that select them.

One source for two consumers: the CDK stack deploys :func:`rule_patterns` verbatim as each rule's
``EventPattern``, and the local demo and the tests match events against the same dictionaries with
EventBridge's own semantics (moto's pattern engine). Facts, from AWS's published examples and the
SageMaker service model (sources in ``tests/events/published/SOURCES.md``):

* every HyperPod event has ``source`` ``aws.sagemaker`` and one of three detail-types;
* a *Cluster Event* nests its fields one level down, under ``detail.EventDetails`` (``ClusterName``,
  ``ClusterArn``, ``InstanceId``, ``EventLevel``, ``Description``); a *Cluster State Change* and a
  *Node Health Event* carry ``detail.ClusterName`` and ``detail.ClusterArn`` directly;
* ``EventLevel`` (Info, Warn, Error) is optional in the service model; older published events omit
  it. A missing level is read as Info unless the description says the operation failed
  (:data:`LEVEL_HINTS`: the same words the rule uses for level-less events);
* ``resources`` holds the cluster ARN, whose last part is the 12-character cluster id; AWS's own
  documentation examples put the cluster *name* there instead, so the allowlist filters on the
  detail's ``ClusterName`` and ``ClusterArn``, never on ``resources``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from hyperpod_debugger.domain.validate import CLUSTER_NAME_RE

SOURCE = "aws.sagemaker"
CLUSTER_EVENT = "SageMaker HyperPod Cluster Event"
STATE_CHANGE = "SageMaker HyperPod Cluster State Change"
NODE_HEALTH = "SageMaker HyperPod Cluster Node Health Event"
DETAIL_TYPES = (CLUSTER_EVENT, STATE_CHANGE, NODE_HEALTH)

#: Cluster Event levels that always start a triage.
TRIAGE_LEVELS = ("Warn", "Error")

#: For a Cluster Event without ``EventLevel``: description words (EventBridge ``wildcard`` syntax,
#: case-sensitive, ``*`` for any text) that make it a Warn or an Error. The rule matches level-less
#: events with these wildcards, and :func:`effective_level` infers the level with the same table.
LEVEL_HINTS: tuple[tuple[str, str], ...] = (
    ("*failed*", "Error"),
    ("*Failed*", "Error"),
    ("*failure*", "Error"),
    ("*ALARM state*", "Error"),
    ("*drift detected*", "Warn"),
    ("*PodDisruptionBudget*", "Warn"),
)

#: botocore's ClusterName pattern (the CLI validates names with the same one) and the 12-character id.
CLUSTER_NAME = CLUSTER_NAME_RE
CLUSTER_ID = re.compile(r"^[a-z0-9]{12}$")
#: A cluster ARN as events carry it: the id form (the API's pattern), or a name where AWS's
#: documentation examples put one; the Region is read from it.
EVENT_CLUSTER_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):sagemaker:(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+):(?P<account>\d{12}):"
    r"cluster/(?P<tail>[A-Za-z0-9-]{1,63})$"
)


# --------------------------------------------------------------------------- levels


@lru_cache(maxsize=64)
def _wildcard(pattern: str) -> re.Pattern[str]:
    """An EventBridge ``wildcard`` value as a regular expression (``*`` matches any text)."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.S)


def wildcard_matches(pattern: str, text: str) -> bool:
    return _wildcard(pattern).fullmatch(text) is not None


def effective_level(level: str | None, description: str | None) -> str:
    """The level an event is treated at: its own, or, without one, what its description says."""
    if level:
        return level
    for pattern, inferred in LEVEL_HINTS:
        if description and wildcard_matches(pattern, description):
            return inferred
    return "Info"


def triggers_triage(level: str | None, description: str | None) -> bool:
    """A Cluster Event worth a triage: Warn or Error, given or inferred. An unknown level counts
    (HyperPod may add one); only Info does not."""
    return effective_level(level, description) != "Info"


# --------------------------------------------------------------------------- the allowlist


@dataclass(frozen=True)
class Allowlist:
    """Which clusters the monitor watches: names, ids and ARNs (empty: every cluster).

    A lowercase 12-character entry may be a name or an id; it is matched as both.
    """

    names: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    arns: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Allowlist:
        """Raises ``ValueError`` naming every entry that is neither a name, an id nor a cluster ARN."""
        names: list[str] = []
        ids: list[str] = []
        arns: list[str] = []
        bad: list[str] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            if entry.startswith("arn:"):
                match = EVENT_CLUSTER_ARN.match(entry)
                if match and CLUSTER_ID.match(match["tail"]):
                    arns.append(entry)
                else:
                    bad.append(entry)
                continue
            if CLUSTER_ID.match(entry):
                ids.append(entry)
            if CLUSTER_NAME.match(entry):
                names.append(entry)
            elif not CLUSTER_ID.match(entry):
                bad.append(entry)
        if bad:
            raise ValueError(
                "not a HyperPod cluster name, 12-character cluster id or cluster ARN "
                f"(arn:aws:sagemaker:<region>:<account>:cluster/<id>): {', '.join(repr(b) for b in bad)}"
            )
        return cls(tuple(dict.fromkeys(names)), tuple(dict.fromkeys(ids)), tuple(dict.fromkeys(arns)))

    @classmethod
    def from_setting(cls, value: str | None) -> Allowlist:
        return cls.parse((value or "").split(","))

    def __bool__(self) -> bool:
        return bool(self.names or self.ids or self.arns)

    @property
    def entries(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.names, *self.ids, *self.arns)))

    def allows(self, cluster_name: str | None, cluster_arn: str | None) -> bool:
        """As the rules match: the name, the ARN, or an ARN ending with a listed id."""
        if not self:
            return True
        arn = cluster_arn or ""
        if cluster_name and cluster_name in self.names:
            return True
        if arn and arn in self.arns:
            return True
        return bool(arn) and any(arn.endswith(f":cluster/{cid}") for cid in self.ids)

    def detail_filter(self) -> dict[str, Any] | None:
        """The pattern fragment for the object that holds ClusterName / ClusterArn (None: no filter)."""
        alternatives: list[dict[str, Any]] = []
        if self.names:
            alternatives.append({"ClusterName": list(self.names)})
        arn_values: list[Any] = [*self.arns, *({"suffix": f":cluster/{cid}"} for cid in self.ids)]
        if arn_values:
            alternatives.append({"ClusterArn": arn_values})
        if not alternatives:
            return None
        return alternatives[0] if len(alternatives) == 1 else {"$or": alternatives}


# --------------------------------------------------------------------------- rule patterns


def _level_filter() -> dict[str, Any]:
    """Warn/Error events, and level-less events whose description reads as a failure."""
    return {
        "$or": [
            {"EventLevel": list(TRIAGE_LEVELS)},
            {
                "EventLevel": [{"exists": False}],
                "Description": [{"wildcard": pattern} for pattern, _ in LEVEL_HINTS],
            },
        ]
    }


def _merge(base: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    """Both fragments at one level. Two ``$or`` cannot share an object, so when both have one, each of
    the second's alternatives carries the first's ``$or``: (a OR b) AND L = (a AND L) OR (b AND L)."""
    if not extra:
        return base
    if "$or" in base and "$or" in extra:
        rest = {k: v for k, v in base.items() if k != "$or"}
        return {**rest, "$or": [{**alternative, "$or": base["$or"]} for alternative in extra["$or"]]}
    return {**base, **extra}


def rule_patterns(allowlist: Allowlist | Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """detail-type → the EventPattern of the rule that sends it to the event handler.

    * Cluster Event: Warn or Error (or level-less and described as a failure), of a listed cluster;
    * Cluster State Change and Node Health Event: every event of a listed cluster (a state change
      may be a recovery; a healthy node resolves its findings).
    """
    allow = allowlist if isinstance(allowlist, Allowlist) else Allowlist.parse(allowlist)
    cluster = allow.detail_filter()
    patterns: dict[str, dict[str, Any]] = {}
    for detail_type in DETAIL_TYPES:
        pattern: dict[str, Any] = {"source": [SOURCE], "detail-type": [detail_type]}
        if detail_type == CLUSTER_EVENT:
            pattern["detail"] = {"EventDetails": _merge(_level_filter(), cluster)}
        elif cluster:
            pattern["detail"] = cluster
        patterns[detail_type] = pattern
    return patterns


# --------------------------------------------------------------------------- cluster ARNs


@dataclass(frozen=True)
class EventCluster:
    """The cluster an event is about, as much as its ARN and name tell."""

    arn: str
    name: str
    region: str
    account: str
    #: the 12-character id, when the ARN carries one (AWS's documentation examples carry the name)
    cluster_id: str | None

    @property
    def reference(self) -> str:
        """What to call the SageMaker API with: the ARN when it is the id form, else the name."""
        return self.arn if self.cluster_id else self.name


def event_cluster(arn: str, name: str) -> EventCluster:
    """The Region comes from the ARN (not from the envelope). Raises ``ValueError`` when the ARN is
    not a SageMaker cluster ARN or names no valid Region."""
    match = EVENT_CLUSTER_ARN.match(arn or "")
    if match is None:
        raise ValueError(f"not a SageMaker HyperPod cluster ARN: {ascii(arn)[:200]}")
    tail = match["tail"]
    cluster_id = tail if CLUSTER_ID.match(tail) and tail != name else None
    if cluster_id is None and not CLUSTER_NAME.match(name or ""):
        raise ValueError(f"the event names no usable cluster: ARN {ascii(arn)[:200]}, name {ascii(name)[:80]}")
    return EventCluster(arn=arn, name=name, region=match["region"], account=match["account"], cluster_id=cluster_id)


__all__ = [
    "CLUSTER_EVENT",
    "DETAIL_TYPES",
    "LEVEL_HINTS",
    "NODE_HEALTH",
    "SOURCE",
    "STATE_CHANGE",
    "TRIAGE_LEVELS",
    "Allowlist",
    "EventCluster",
    "effective_level",
    "event_cluster",
    "rule_patterns",
    "triggers_triage",
    "wildcard_matches",
]
