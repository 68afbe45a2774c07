"""Suggested commands are pasted into shells: every value must stay inert."""

from __future__ import annotations

import shlex

import pytest

from hyperpod_debugger.domain.commands import batches, mutating, read_only, shell_join

HOSTILE = ["g1;rm -rf /", "$(id)", "`reboot`", "a b", "it's", "x\ny", "--node-ids", ""]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_round_trip_as_one_argument(value):
    # GIVEN a hostile value in an argv list
    cmd = shell_join(["aws", "sagemaker", "describe-cluster", "--cluster-name", value])
    # WHEN a shell splits the line
    # THEN the value comes back unchanged as exactly one token
    assert shlex.split(cmd)[-1] == value


def test_every_mutating_command_carries_a_drift_note_and_configuration_changes_the_template_one():
    sg = mutating(
        ["aws", "ec2", "authorize-security-group-egress"],
        "p",
        blast_radius="b",
        changes_configuration=True,
        preconditions=["p"],
    )
    reboot = mutating(
        ["aws", "sagemaker", "batch-reboot-cluster-nodes"],
        "p",
        blast_radius="b",
        changes_configuration=False,
        preconditions=["p"],
    )
    assert sg.iac_warning and "template" in sg.iac_warning and sg.step == "change"
    assert reboot.iac_warning and "No infrastructure-as-code drift" in reboot.iac_warning
    assert not read_only(["aws", "ec2", "describe-vpcs"], "p").mutates


def test_node_batches_never_exceed_the_api_limit():
    ids = [f"i-{n:017x}" for n in range(61)]
    sizes = [len(b) for b in batches(ids)]
    assert sizes == [25, 25, 11]
    assert [i for b in batches(ids) for i in b] == ids
