"""§ E: the node's software versions read from its probe document, and their comparison across a group.

The outputs below follow the real formats (sources recorded in ``probe/versions.py``): NVIDIA's
``/proc/driver/nvidia/version`` for the open and the proprietary module, ``version.json``/``version.txt`` of
the CUDA toolkit, the EFA installer's ``# EFA installer version:`` header, ``fi_info --version`` as the AWS
EFA guide prints it, ``fi_info -p efa``'s provider version, the ``aws-ofi-nccl X.Y.Z-aws`` string of the
plugin, and ``libnccl.so.2.x.y`` file names. Expected values come from the scenario, not from the code.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hyperpod_debugger.domain.model import CheckStatus, Priority, Tag
from hyperpod_debugger.probe.consistency import CHECK_FLOOR, CHECK_SKEW, NodeVersions, compare
from hyperpod_debugger.probe.document import ProbeDocument, ProbeItem
from hyperpod_debugger.probe.versions import parse, version_key
from tests import builders

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
CLUSTER = builders.cluster()

OPEN_MODULE = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Oct  8 03:22:07 UTC 2024"
)
CUDA_JSON = """file /usr/local/cuda/version.json
{
   "cuda" : {
      "name" : "CUDA SDK",
      "version" : "12.4.1"
   },
   "cuda_cccl" : {
      "name" : "CUDA C++ Core Compute Libraries","""


def versions_text(
    *,
    driver: str = "580.95.05",
    efa: str = "1.38.0",
    libfabric: str = "1.22.0amzn5.0",
    ofi: str = "1.16.3-aws",
    nccl: str = "2.21.5",
    driver_part: str | None = None,
) -> str:
    return "\n".join(
        [
            "== kernel",
            "5.15.0-1063-aws",
            "== nvidia_driver",
            driver_part if driver_part is not None else OPEN_MODULE.format(v=driver),
            "== cuda",
            CUDA_JSON,
            "== efa_installer",
            f"# EFA installer version: {efa}",
            "# Debug packages installed: no",
            "# Packages installed:",
            "== libfabric",
            f"fi_info: {libfabric}",
            f"libfabric: {libfabric}",
            "libfabric api: 1.22",
            "== aws_ofi_nccl",
            "path /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so",
            f"aws-ofi-nccl {ofi}",
            "== nccl",
            f"/usr/local/cuda/lib/libnccl.so.{nccl}",
            "== neuron_driver",
            "== neuron_runtime",
            "",
        ]
    )


NVSMI_Q = """
==============NVSMI LOG==============

Timestamp                                 : Fri Dec  4 12:00:00 2026
Driver Version                            : 580.95.05
CUDA Version                              : 12.4

Attached GPUs                             : 8
"""
FI_INFO_EFA = (
    "provider: efa\n    fabric: efa\n    domain: rdmap16s27-rdm\n    version: 122.0\n"
    "    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n"
)


def doc(items: dict[str, str | ProbeItem], host: str = "ip-10-1-0-1") -> ProbeDocument:
    return ProbeDocument(
        hostname=host,
        collected_at=NOW,
        uptime_s=3600.0,
        items={
            k: v if isinstance(v, ProbeItem) else ProbeItem(command=k, exit_code=0, stdout=v) for k, v in items.items()
        },
    )


def gpu_doc(**kw: str) -> ProbeDocument:
    return doc(
        {
            "software_versions": versions_text(**kw),
            "nvidia_smi_q": NVSMI_Q,
            "efa_module": "2.13.0g\n",
            "fi_info_efa": FI_INFO_EFA,
        }
    )


# ------------------------------------------------------------------------------------------------ the parser


def test_a_gpu_node_reads_every_component_it_has():
    v = parse(gpu_doc())
    got = {c: r.version for c, r in v if r.state == "read"}
    assert got == {
        "nvidia_driver": "580.95.05",
        "cuda_driver": "12.4",
        "cuda_toolkit": "12.4.1",
        "kernel": "5.15.0-1063-aws",
        "efa_installer": "1.38.0",
        "efa_driver": "2.13.0g",
        "libfabric": "1.22.0amzn5.0",
        "efa_provider": "122.0",
        "aws_ofi_nccl": "1.16.3-aws",
        "nccl": "2.21.5",
    }
    assert v.get("neuron_driver").state == "absent" and v.get("neuron_runtime").state == "absent"
    assert v.get("nvidia_driver").detail == "/proc/driver/nvidia/version"
    assert v.get("cuda_toolkit").detail == "/usr/local/cuda/version.json"


def test_the_proprietary_module_line_and_an_old_toolkit_are_read():
    line = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023"
    text = versions_text(driver_part=line).replace(CUDA_JSON, "file /usr/local/cuda/version.txt\nCUDA Version 10.2.89")
    v = parse(doc({"software_versions": text}))
    assert v.get("nvidia_driver").version == "535.129.03"
    assert v.get("cuda_toolkit").version == "10.2.89"
    assert v.get("cuda_toolkit").detail == "/usr/local/cuda/version.txt"


def test_the_driver_falls_back_to_nvidia_smi_q_when_the_proc_file_is_not_there():
    v = parse(gpu_doc(driver_part=""))
    assert (v.get("nvidia_driver").version, v.get("nvidia_driver").detail) == ("580.95.05", "nvidia-smi -q")


def test_a_document_without_the_item_is_unread_never_absent():
    v = parse(doc({"uptime": "1.0 1.0\n"}))
    assert all(r.state == "unread" for _, r in v), list(v)
    assert "no software_versions item" in v.get("nccl").detail
    assert not v.any_read


def test_a_timed_out_item_and_a_read_that_failed_are_unread():
    timed_out = ProbeItem(command="x", exit_code=124, stdout="")
    assert parse(doc({"software_versions": timed_out})).get("kernel").state == "unread"
    text = versions_text().replace(
        "fi_info: 1.22.0amzn5.0\nlibfabric: 1.22.0amzn5.0\nlibfabric api: 1.22", "(not read: exit 124)"
    )
    reading = parse(doc({"software_versions": text})).get("libfabric")
    assert reading.state == "unread" and "exit 124" in reading.detail


def test_a_plugin_without_a_version_string_is_unread():
    text = versions_text().replace("aws-ofi-nccl 1.16.3-aws", "(not read: exit 1)")
    reading = parse(doc({"software_versions": text})).get("aws_ofi_nccl")
    assert reading.state == "unread" and "carries no version string" in reading.detail


def test_neuron_versions_and_a_runtime_with_only_its_major():
    text = versions_text().replace(
        "== neuron_driver\n== neuron_runtime\n",
        "== neuron_driver\n2.19.64.0\n== neuron_runtime\n/opt/aws/neuron/lib/libnrt.so.1\n",
    )
    v = parse(doc({"software_versions": text}))
    assert v.get("neuron_driver").version == "2.19.64.0"
    assert v.get("neuron_runtime").state == "unread"
    text2 = text.replace("libnrt.so.1\n", "libnrt.so.1\n/opt/aws/neuron/lib/libnrt.so.2.21.41.0\n")
    assert parse(doc({"software_versions": text2})).get("neuron_runtime").version == "2.21.41.0"


def test_versions_order_by_their_numbers():
    assert version_key("570.195.03") < version_key("580.95.05")
    assert version_key("1.9.0") < version_key("1.10.0")


# ------------------------------------------------------------------------------------------- the comparison


def fleet(n: int, odd: dict[int, dict[str, str]] | None = None, group: str = "gpu-workers") -> list[NodeVersions]:
    return [NodeVersions(f"i-{i:017x}", group, parse(gpu_doc(**(odd or {}).get(i, {})))) for i in range(n)]


def problems(findings):
    return [f for f in findings if f.tag is not Tag.PASS]


def test_three_of_64_on_an_older_driver_give_exactly_one_finding_naming_them():
    nodes = fleet(64, {5: {"driver": "570.195.03"}, 17: {"driver": "570.195.03"}, 40: {"driver": "570.195.03"}})
    findings, coverage = compare(nodes, CLUSTER)
    [skew] = problems(findings)
    assert skew.tag is Tag.FAIL and skew.priority is Priority.P1 and skew.section == "E"
    assert skew.check == CHECK_SKEW and skew.instance_group == "gpu-workers" and skew.instance_id is None
    assert skew.message == "3 of 64 nodes of gpu-workers run NVIDIA driver 570.195.03; 61 run 580.95.05"
    odd_line = next(e for e in skew.evidence if e.startswith("570.195.03"))
    for i in (5, 17, 40):
        assert f"i-{i:017x}" in odd_line
    assert "580.95.05 (the majority's) is the newer" in skew.evidence[0]
    update = [c for c in skew.suggested_commands if "update-cluster-software" in c.command]
    assert update and update[0].mutates and "every node of instance group gpu-workers" in update[0].blast_radius
    assert "--instance-groups InstanceGroupName=gpu-workers" in update[0].command
    assert update[0].iac_warning
    assert any(not c.mutates and "describe-cluster-node" in c.command for c in skew.suggested_commands)
    assert coverage[0].status is CheckStatus.RAN and coverage[0].nodes is None


def test_two_skewed_components_give_two_findings():
    nodes = fleet(8, {2: {"driver": "570.195.03"}, 6: {"efa": "1.41.0", "libfabric": "1.22.0amzn5.0"}})
    skews = [f for f in problems(compare(nodes, CLUSTER)[0]) if f.check == CHECK_SKEW]
    assert sorted(f.message for f in skews) == [
        "1 of 8 nodes of gpu-workers run EFA installer 1.41.0; 7 run 1.38.0",
        "1 of 8 nodes of gpu-workers run NVIDIA driver 570.195.03; 7 run 580.95.05",
    ]
    efa = next(f for f in skews if "EFA" in f.message)
    assert "1.41.0 is the newer, not the majority's 1.38.0" in efa.evidence[0]


def test_all_equal_is_a_pass_naming_the_versions():
    findings, _ = compare(fleet(4), CLUSTER)
    assert problems(findings) == []
    [ok] = findings
    assert ok.tag is Tag.PASS and "NVIDIA driver 580.95.05" in ok.message and "EFA installer 1.38.0" in ok.message
    assert ok.message.startswith("The 4 compared nodes of gpu-workers run the same software")


def test_unread_nodes_are_listed_and_not_counted():
    nodes = fleet(8, {3: {"driver": "570.195.03"}})
    nodes += [NodeVersions("i-unread0000000001", "gpu-workers", parse(doc({"uptime": "1 1\n"})))]
    [skew] = problems(compare(nodes, CLUSTER)[0])
    assert skew.message == "1 of 8 nodes of gpu-workers run NVIDIA driver 570.195.03; 7 run 580.95.05"
    assert any(e.startswith("1 not read (not counted): i-unread0000000001") for e in skew.evidence)


def test_a_group_read_on_fewer_than_two_nodes_is_unknown_not_pass():
    nodes = [NodeVersions(f"i-{i}", "gpu-workers", parse(doc({"uptime": "1 1\n"}))) for i in range(3)]
    findings, coverage = compare(nodes, CLUSTER)
    [unknown] = findings
    assert unknown.tag is Tag.UNKNOWN and "versions read on 0 of 3" in unknown.message
    assert coverage[0].status is CheckStatus.UNKNOWN


def test_an_ancient_efa_stack_passes_the_comparison_but_not_the_floor():
    findings, _ = compare(fleet(4, {i: {"efa": "1.26.1", "libfabric": "1.18.2amzn1.0"} for i in range(4)}), CLUSTER)
    floors = sorted(f.message for f in findings if f.check == CHECK_FLOOR)
    assert floors == [
        "4 node(s) of gpu-workers run EFA installer 1.26.1, older than 1.38.0",
        "4 node(s) of gpu-workers run libfabric 1.18.2amzn1.0, older than 1.22.0",
    ]
    assert all(f.tag is Tag.WARN and f.priority is Priority.P2 for f in findings if f.check == CHECK_FLOOR)


def test_groups_are_compared_separately():
    nodes = fleet(3, group="gpu-a") + fleet(3, {0: {"driver": "575.57.08"}}, group="gpu-b")
    nodes[3:] = [NodeVersions(n.instance_id + "b", n.group, n.versions) for n in nodes[3:]]
    nodes[:3] = [NodeVersions(n.instance_id, n.group, parse(gpu_doc(driver="575.57.08"))) for n in nodes[:3]]
    [skew] = problems(compare(nodes, CLUSTER)[0])
    assert skew.instance_group == "gpu-b"
    assert skew.message == "1 of 3 nodes of gpu-b run NVIDIA driver 575.57.08; 2 run 580.95.05"


def test_a_partial_view_names_its_nodes_so_it_resolves_no_stored_skew():
    findings, coverage = compare(fleet(4, {1: {"nccl": "2.18.3"}}), CLUSTER, group_sizes={"gpu-workers": 64})
    [skew] = problems(findings)
    assert "4 of the 64 Running nodes of gpu-workers were probed in this run" in skew.evidence
    assert coverage[0].nodes is not None and len(coverage[0].nodes) == 4
    assert "a sweep batch compares its own batch" in (coverage[0].reason or "")


@pytest.mark.parametrize("hostile", ["g1;rm -rf /", "$(id)"])
def test_group_names_are_quoted_in_the_command(hostile):
    [skew] = problems(compare(fleet(2, {0: {"driver": "570.195.03"}}, group=hostile), CLUSTER)[0])
    update = next(c for c in skew.suggested_commands if "update-cluster-software" in c.command)
    assert f"'InstanceGroupName={hostile}'" in update.command


def test_the_update_command_is_in_the_sagemaker_api_model():
    # botocore's service model (what the AWS CLI builds its commands from), not our code
    import botocore.session
    from botocore import xform_name

    model = botocore.session.get_session().get_service_model("sagemaker")
    [skew] = problems(compare(fleet(2, {0: {"driver": "570.195.03"}}), CLUSTER)[0])
    for command in skew.suggested_commands:
        words = command.command.split()
        names = {xform_name(n, "-"): n for n in model.operation_names}
        assert words[:2] == ["aws", "sagemaker"] and words[2] in names
        members = model.operation_model(names[words[2]]).input_shape.members
        flags = {w for w in words if w.startswith("--")} - {"--region"}
        assert flags <= {"--" + xform_name(m, "-") for m in members}, words


def test_two_nodes_that_differ_have_no_majority():
    [skew] = problems(compare(fleet(2, {0: {"driver": "570.195.03"}}), CLUSTER)[0])
    assert skew.message == "1 of 2 nodes of gpu-workers run NVIDIA driver 570.195.03; 1 run 580.95.05"
    assert skew.evidence[0] == "no majority: 580.95.05 is the newer"
    [rest] = [f for f in compare(fleet(2, {0: {"driver": "570.195.03"}}), CLUSTER)[0] if f.tag is Tag.PASS]
    assert rest.message.startswith("The 2 compared nodes of gpu-workers agree on the rest of their software: ")
    assert "NVIDIA driver" not in rest.message and "NCCL 2.21.5" in rest.message


# the floors' values come from the HyperPod AMI release notes for EKS (October-November 2025: NVIDIA driver
# 570.195.03 on the Amazon Linux 2 builds, aws-ofi-nccl 1.16.3), not from the table under test
@pytest.mark.parametrize(
    ("odd", "expected"),
    [
        ({"driver": "550.163.01"}, "2 node(s) of gpu-workers run NVIDIA driver 550.163.01, older than 570.195.03"),
        ({"ofi": "1.15.0-aws"}, "2 node(s) of gpu-workers run aws-ofi-nccl 1.15.0-aws, older than 1.16.3"),
    ],
)
def test_a_stack_older_than_every_hyperpod_ami_of_the_last_year_is_below_the_floor(odd, expected):
    findings, _ = compare(fleet(2, {0: odd, 1: odd}), CLUSTER)
    [floor] = [f for f in findings if f.check == CHECK_FLOOR]
    assert floor.message == expected and (floor.tag, floor.priority) == (Tag.WARN, Priority.P2)


@pytest.mark.parametrize("odd", [{"driver": "570.195.03"}, {"driver": "580.126.09"}, {"ofi": "1.16.3-aws"}])
def test_the_oldest_stack_a_current_ami_ships_and_newer_ones_are_not_below_the_floor(odd):
    findings, _ = compare(fleet(2, {0: odd, 1: odd}), CLUSTER)
    assert [f.message for f in findings if f.check == CHECK_FLOOR] == []
