"""One root cause across checks: the effect is linked to its cause, nothing is dropped, the report says it once."""

from __future__ import annotations

from hyperpod_debugger.checks.base import finding
from hyperpod_debugger.domain.model import Priority, Tag
from hyperpod_debugger.remediation.rootcause import link_causes
from tests import builders as b

NODE = "i-02cf87cc552cf78e4"
OTHER = "i-0aaaaaaaaaaaaaaaa"


def _f(check, message, *, node=None, group=None, section="D", tag=Tag.FAIL):
    return finding(
        b.observation(),
        check,
        tag,
        message,
        priority=None if tag is Tag.PASS else Priority.P1,
        section=section,
        instance_id=node,
        instance_group=group,
    )


def _by_check(findings):
    return {(f.check, f.instance_id): f for f in findings}


def test_a_lifecycle_failure_is_traced_through_its_log_to_the_missing_s3_route():
    s3 = _f("vpc.endpoints", "S3 gateway endpoint vpce-1 is not associated with route table(s) rtb-1", section="B.4")
    log = _f("logs.lifecycle", f"Lifecycle script failed on {NODE}: the script could not reach Amazon S3", node=NODE)
    status = _f("nodes.status", f"Node {NODE} is in Failure: lifecycle script failure", node=NODE)
    event = _f("cluster.events", "1 Error event(s): lifecycle script failure", node=NODE)
    out = _by_check(link_causes([status, event, log, s3]))
    root = out[("vpc.endpoints", None)]
    for key in (("nodes.status", NODE), ("cluster.events", NODE), ("logs.lifecycle", NODE)):
        assert out[key].caused_by == f"{s3.message} (§ B.4)", key
    assert len(root.explains) == 3 and root.caused_by is None
    # nothing dropped: every finding keeps its evidence and commands
    assert [f.message for f in link_causes([status, event, log, s3])] == [
        status.message,
        event.message,
        log.message,
        s3.message,
    ]


def test_without_an_s3_problem_the_log_is_the_root():
    log = _f("logs.lifecycle", f"Lifecycle script failed on {NODE}: an AWS call was denied", node=NODE)
    status = _f("nodes.status", f"Node {NODE} is in Failure: lifecycle script failure", node=NODE)
    out = _by_check(link_causes([status, log]))
    assert out[("nodes.status", NODE)].caused_by == f"{log.message} (§ D)"
    assert out[("logs.lifecycle", NODE)].explains == [f"{status.message} (§ D)"]


def test_links_need_the_same_node_or_group_and_a_problem_on_both_sides():
    log = _f("logs.lifecycle", f"Lifecycle script failed on {OTHER}", node=OTHER)
    status = _f("nodes.status", f"Node {NODE} is in Failure: lifecycle script failure", node=NODE)
    short = _f("cluster.instance_groups", "Instance group a has 4 of 6 nodes", group="a", section="C", tag=Tag.WARN)
    capacity_b = _f("cluster.events", "2 Error event(s) in group b: insufficient capacity", group="b", section="C")
    passed = _f("cluster.events", "insufficient capacity", group="a", section="C", tag=Tag.PASS)
    assert all(f.caused_by is None and not f.explains for f in link_causes([log, status, short, capacity_b, passed]))
    capacity_a = _f("cluster.events", "2 Error event(s) in group a: insufficient capacity", group="a", section="C")
    out = _by_check(link_causes([short, capacity_a]))
    assert out[("cluster.instance_groups", None)].caused_by.startswith("2 Error event(s) in group a")


def test_a_dead_slurmd_explains_the_down_node():
    down = _f("slurm.nodes", "Slurm node ip-10-1-2-3 (instance i-1) is down and not responding", node=NODE, section="H")
    dead = _f("probe.services", "slurmd is not running (failed) on this Slurm compute node", node=NODE, section="H")
    out = _by_check(link_causes([down, dead]))
    assert out[("slurm.nodes", NODE)].caused_by == f"{dead.message} (§ H)"


def test_the_short_report_says_an_explained_cluster_problem_once_under_its_cause():
    from hyperpod_debugger.domain.model import ClusterRef, Coverage
    from hyperpod_debugger.report.text import render_text
    from hyperpod_debugger.run_report import build_report

    short = _f("cluster.instance_groups", "Instance group a has 4 of 6 nodes", group="a", section="C", tag=Tag.WARN)
    capacity = _f("cluster.events", "2 Error event(s) in group a: insufficient capacity", group="a", section="C")
    report = build_report(
        None, b.context().now, ClusterRef(name="c", region="us-west-2"), link_causes([short, capacity]), Coverage()
    )
    text = render_text(report, verbose=False)
    problems = text.split("== Cluster-level problems ==", 1)[1]
    assert "[WARN] P1 Instance group a has 4 of 6 nodes" not in problems
    assert "    explains: Instance group a has 4 of 6 nodes (§ C)" in problems
    full = render_text(report, verbose=True)
    assert "[WARN] P1 Instance group a has 4 of 6 nodes" in full and "explained by: 2 Error event(s)" in full


def test_a_ten_node_cluster_with_seven_faults_reads_in_120_lines():
    """Issue 14's bound on the default report: ten nodes, seven faults (five on nodes, two cluster-level),
    each node fault with the commands the ladder builds for it."""
    from hyperpod_debugger.domain.commands import read_only
    from hyperpod_debugger.domain.model import ClusterRef, Coverage
    from hyperpod_debugger.domain.observations import Observed
    from hyperpod_debugger.remediation.ladder import refine, verdicts
    from hyperpod_debugger.report.text import render_text
    from hyperpod_debugger.run_report import build_report

    ids = [f"i-0{n:016x}" for n in range(10)]
    obs = b.observation(nodes=Observed.ok([b.node(i) for i in ids]))
    look = read_only(["aws", "sagemaker", "describe-cluster-node", "--node-id", ids[0]], "look")

    def node_fault(i, check, message, action, tag=Tag.FAIL, section="G.1"):
        return finding(
            obs,
            check,
            tag,
            message,
            priority=Priority.P0 if tag is Tag.FAIL else Priority.P1,
            section=section,
            instance_id=ids[i],
            instance_group="workers",
            node_action=action,
            suggested_commands=[look],
        )

    findings = [
        node_fault(0, "probe.xid", "Xid 79 (GPU has fallen off the bus) survived a reboot", "replace"),
        node_fault(0, "probe.gpu_count", "7 of 8 GPUs visible to nvidia-smi", "reboot"),
        node_fault(1, "probe.gpu_row_remap", "row remapping pending on GPU 2", "reboot", Tag.WARN, "G.1.a"),
        node_fault(2, "probe.oom", "1 OOM kill inside job memory limits", "fix-workload", Tag.WARN, "I.3"),
        node_fault(3, "probe.session", "Could not probe the node (TIMEOUT)", None, Tag.UNKNOWN, "K"),
        node_fault(4, "probe.root_volume", "Root volume / is 97% full", "investigate", section="I.2"),
        _f("vpc.dns", "enableDnsHostnames is disabled on vpc-1", section="B.2"),
        _f("network.efa_sg", "Security group sg-1 misses its self-referencing rules", section="A"),
    ]
    refined = refine(findings, obs, b.context())
    report = build_report(
        None,
        b.context().now,
        ClusterRef(name="c", region="us-west-2"),
        refined,
        Coverage(),
        verdicts=verdicts(refined, obs, b.context()),
    )
    text = render_text(report, verbose=False)
    assert len(text.splitlines()) <= 120, text
    table = text.split("== Cluster-level problems ==", 1)[0]
    assert [line.split()[0] for line in table.splitlines() if line[:1].isupper() and " i-0" in line] == [
        "REPLACE",
        "REBOOT",
        "INVESTIGATE",
        "UNKNOWN",
        "FIX",
    ]
