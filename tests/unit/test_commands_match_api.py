"""Every AWS CLI command we suggest names an operation and parameters the service's API model has.

The expected values come from botocore's service models (the same data the AWS CLI builds its commands
from: an operation ``BatchRebootClusterNodes`` is ``batch-reboot-cluster-nodes``, a member ``NodeLogicalIds``
is ``--node-logical-ids``), not from our code. The commands are those of the demo's golden report (every
check's suggestions on the simulated account) and of the ladder under Continuous provisioning.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import botocore.session
import pytest
from botocore import xform_name

from hyperpod_debugger.domain.observations import ClusterNode, Observed
from hyperpod_debugger.remediation.ladder import refine
from tests import builders as b
from tests.unit.test_ladder import IID, _node_finding

GOLDEN = Path(__file__).resolve().parents[1] / "e2e" / "golden" / "demo.json"
#: options of the AWS CLI itself, valid on every command
GLOBAL_OPTIONS = {"--region", "--output", "--query", "--profile", "--no-paginate", "--cli-input-json"}
#: the CLI's own commands that are not API operations
CLI_ONLY = {("ssm", "start-session"), ("logs", "tail")}
_SESSION = botocore.session.get_session()


def _operations(service: str) -> dict[str, set[str]]:
    model = _SESSION.get_service_model(service)
    out = {}
    for name in model.operation_names:
        shape = model.operation_model(name).input_shape
        members = set(shape.members) if shape is not None else set()
        flags = {"--" + xform_name(m, "-") for m in members}
        flags |= {"--no-" + f[2:] for f in flags}  # booleans have a negative form
        out[xform_name(name, "-")] = flags
    return out


def _aws_commands(report: object) -> list[str]:
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("command", "next_command", "then_command") and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(report)
    return sorted({c for c in found if c.startswith("aws ")})


def _check(command: str) -> None:
    argv = shlex.split(command)
    service, operation = argv[1], argv[2]
    if (service, operation) in CLI_ONLY:
        return
    operations = _operations(service)
    assert operation in operations, f"{service} has no operation {operation}: {command}"
    flags = {a.split("=", 1)[0] for a in argv[3:] if a.startswith("--")}
    unknown = flags - operations[operation] - GLOBAL_OPTIONS
    assert not unknown, f"{service} {operation} has no parameter(s) {sorted(unknown)}: {command}"


def _golden_commands() -> list[str]:
    text = GOLDEN.read_text()
    reports = json.loads(text) if text.lstrip().startswith("[") else [json.loads(text)]
    return _aws_commands(reports)


@pytest.mark.parametrize("command", _golden_commands())
def test_every_suggested_aws_command_of_the_demo_is_in_the_api_model(command):
    _check(command)


def test_the_golden_report_suggests_node_actions_at_all():
    commands = _golden_commands()
    assert any(" batch-replace-cluster-nodes " in c for c in commands)
    assert any(" batch-reboot-cluster-nodes " in c for c in commands)


def test_continuous_provisioning_reboots_and_replaces_by_node_logical_id():
    node = b.node(IID, group_name="workers", status="Failure")
    node = ClusterNode(
        **{**{f: getattr(node, f) for f in node.__slots__}, "logical_id": "3f9a0c7e2b8d4e61a5c0f2d9b7e4a180"}
    )
    obs = b.observation(nodes=Observed.ok([node]))
    assert obs.cluster.provisioning_mode == "Continuous"
    commands = [
        c.command for f in refine([_node_finding(obs, "replace")], obs, b.context()) for c in f.suggested_commands
    ]
    (replace,) = [c for c in commands if "batch-replace-cluster-nodes" in c]
    assert "--node-logical-ids 3f9a0c7e2b8d4e61a5c0f2d9b7e4a180" in replace and "--node-ids" not in replace
    _check(replace)
