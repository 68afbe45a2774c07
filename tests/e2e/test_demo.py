"""The demo, end to end, as a user runs it: a subprocess with no AWS credentials at all."""

from __future__ import annotations

import pathlib
import re
import sys
from datetime import UTC, datetime

import pytest

from tests.e2e.snapshot import run_demo

#: The repository root: the demo's monitor part imports the Lambda handlers from ``functions/`` there.
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_output() -> str:
    result = run_demo("--verbose")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # The handlers' Powertools log lines and EMF metrics stay out of what the user sees.
    for stream in (result.stdout, result.stderr):
        assert not re.search(r'^\{"level":', stream, re.M)
        assert '"_aws":' not in stream
    return result.stdout


def test_demo_shows_findings_in_every_required_section(demo_output):
    pointed = set(
        re.findall(r"^\[(?:FAIL|WARN)\] P\d .* → references/node-diagnostics-detail\.md § (\S+)$", demo_output, re.M)
    )
    assert {"A", "B.2", "B.3", "B.4", "B.5", "C", "D", "F", "J"} <= pointed


def test_demo_shows_healthy_parts_as_pass(demo_output):
    assert len(re.findall(r"^\[PASS\] ", demo_output, re.M)) >= 10


def test_demo_reports_both_orchestrators_and_suggests_only_quoted_commands(demo_output):
    assert "· EKS ·" in demo_output and "· Slurm ·" in demo_output
    assert "Suggested command (run this yourself)" in demo_output
    assert "blast radius:" in demo_output and "IaC:" in demo_output


@pytest.fixture(scope="module")
def demo_json() -> str:
    result = run_demo("--json")
    result.check_returncode()
    return result.stdout


def test_demo_json_is_a_list_of_reports(demo_json):
    import json

    reports = json.loads(demo_json)
    assert [r["cluster"]["orchestrator"] for r in reports] == ["EKS", "Slurm"]


def test_the_demo_is_unchanged_but_for_times_random_ids_and_the_version(demo_output, demo_json):
    # the reports and the printed Slack/email messages as saved before a refactoring (tests/e2e/golden/);
    # an intended change of output rewrites them: python -m tests.e2e.snapshot --write
    from tests.e2e.snapshot import GOLDEN, normalise

    assert normalise(demo_output) == (GOLDEN / "demo.txt").read_text()
    assert normalise(demo_json) == (GOLDEN / "demo.json").read_text()


def test_every_problem_carries_its_runbook_link(demo_output):
    blocks = re.split(r"\n(?=\[)", demo_output)
    problems = [b for b in blocks if re.match(r"\[(FAIL|WARN|UNKNOWN)\]", b)]
    assert problems
    for block in problems:
        assert "    runbook: references/node-diagnostics-detail.md#" in block, block.splitlines()[0]


def test_every_mutating_suggestion_shows_blast_radius_and_iac_note(demo_output):
    # a command's own blast radius under it; its preconditions and IaC note under it too, or, when every
    # suggested command of the finding shares them, once after the last one ("For each of the N ...")
    triage, _, monitor = demo_output.partition("MONITOR:")
    findings = re.split(r"\n(?=\[(?:FAIL|WARN|UNKNOWN|INFO|PASS)\])", triage)
    seen = 0
    for block in findings:
        commands = block.split("Suggested command (run this yourself):")[1:]
        shared = "For each of the" in block
        for command in commands:
            seen += 1
            head = command.split("Investigate (read-only)", 1)[0].split("For each of the", 1)[0]
            assert "blast radius:" in head
            if not shared:
                assert "IaC:" in head and "precondition:" in head
        if shared:
            tail = block.split("For each of the", 1)[1]
            assert "IaC:" in tail and "precondition:" in tail
    assert seen
    # the monitor's messages (Slack and email): each suggested command with its blast radius and IaC note
    suggested = re.split(r"Suggested command \(run this yourself\)", monitor)[1:]
    assert suggested
    for text in suggested:
        head = re.split(r"Investigate \(read-only\)|\n  │ [🔴🟠🟡⚪✅]|\n  │ P\d ", text, maxsplit=1)[0]
        assert re.search(r"blast radius:", head, re.I) and "IaC:" in head, head[:600]


def test_the_demo_shows_the_ladder_and_iac_ownership(demo_output):
    assert "batch-replace-cluster-nodes" in demo_output and "root and secondary volumes" in demo_output
    assert "scontrol update nodename=ip-" in demo_output  # Slurm node name filled in
    assert "kubectl cordon hyperpod-i-" in demo_output  # EKS node name filled in
    assert "CloudFormation stack 'ml-eks-prod-network'" in demo_output
    assert "managed by Terraform" in demo_output
    assert "fix the job" in demo_output  # application-class Xid


def test_the_demo_probes_its_nodes_through_the_fake_session_manager(demo_output):
    # on-node findings, per node, from probe.sh's documents carried over the SSM data channel
    assert demo_output.count("-- node i-") >= 5
    pointed = set(
        re.findall(r"^\[(?:FAIL|WARN)\] P\d .* → references/node-diagnostics-detail\.md § (\S+)$", demo_output, re.M)
    )
    assert {"G.1", "G.1.a", "I.2", "H"} <= pointed
    assert "7 of 8 GPUs visible to nvidia-smi" in demo_output
    # a node the service cannot reach is UNKNOWN in § K, never a hardware verdict
    assert re.search(
        r"^\[UNKNOWN\] P1 Could not probe node i-\w+ \(UNREACHABLE\).* → references/"
        r"node-diagnostics-detail\.md § K$",
        demo_output,
        re.M,
    )


def test_the_demo_shows_orchestrator_findings(demo_output):
    # EKS: labels and pods from the fake Kubernetes API (F, G, O); Slurm: the controller's view (H)
    kubernetes = demo_output.split("== Kubernetes (EKS nodes and system pods) ==", 1)[1].split("\n== ", 1)[0]
    assert {"F", "G", "O"} <= set(re.findall(r"§ (\S+)$", kubernetes, re.M))
    slurm = demo_output.split("== Slurm (controller, nodes, jobs) ==", 1)[1].split("\n== ", 1)[0]
    assert "identified by scontrol ping" in slurm
    assert re.search(r"^\[FAIL\] P1 Slurm node ip-\S+ .* → references/node-diagnostics-detail\.md § H$", slurm, re.M)
    # the down node's verdict is a reboot (HMA saw Xid 79 on it): it is drained, never also resumed
    slurm_report = demo_output.split("HyperPod triage: ml-slurm-train", 1)[1]
    assert re.search(r"^\s+\$ scontrol update nodename=\S+ state=drain", slurm_report, re.M)
    assert not re.search(r"^\s+\$ scontrol update .*state=resume", slurm_report, re.M)


def test_the_demo_walks_the_monitor_path_through_the_lambda_handlers(demo_output):
    assert "MONITOR: skipped" not in demo_output
    monitor = demo_output[demo_output.index("MONITOR:") :]
    # 1. the EventBridge event goes to the real event handler: processed, NEW findings in the store
    assert '"detail-type": "SageMaker HyperPod Cluster Node Health Event"' in monitor
    handled = re.search(
        r"^   event_handler → status=processed, transitions: NEW ×(\d+) \(a triage scoped to i-[0-9a-f]+", monitor, re.M
    )
    assert handled and int(handled.group(1)) > 0
    # 2. the stream's records reach the notifier ten per invocation, as deployed; the alert group it armed is
    # flushed into ONE message per channel: the cluster's first triage is its baseline summary
    sent = re.search(
        r"^2\. The table's stream hands (\d+) record\(s\) to stream_notifier, ten per invocation as deployed "
        r"\((\d+) invocation\(s\), 0 record\(s\) failed\)\..* the Slack sink received (\d+) message\(s\) and "
        r"(\d+) email\(s\) arrived, one per incident group, not one per finding\.$",
        monitor,
        re.M,
    )
    assert sent, monitor[:3000]
    records, invocations, payloads, emails = map(int, sent.groups())
    assert invocations == -(-records // 10) and records > 10
    assert payloads == 1 and emails == 1
    node = handled.group(0).rsplit(" ", 1)[-1]
    baseline = re.search(
        r"Slack \(Block Kit, as the sink received it and Slack displays it\):\n"
        r"  │ 🔴 ml-eks-prod: monitoring started, (\d+) open problems\n",
        monitor,
    )
    assert baseline, monitor[:4000]
    step2 = monitor[baseline.end() : monitor.index("\n3. ")]
    # the event's node is in it, as one incident with its verdict; the P2s are named as below the page line
    assert re.search(rf"^  │ 🟠 \*P1 INVESTIGATE\* `{node}` \(gpu-workers\): ", step2, re.M)
    assert "below this channel's alert priority" in step2
    assert f"— Subject: [HyperPod P0] ml-eks-prod: monitoring started, {baseline.group(1)} open problems" in step2
    # every problem points at its runbook section, and the command that prints it
    assert "references/node-diagnostics-detail.md § B.2 (hyperpod-debugger runbook B.2)" in step2
    assert "hyperpod-debugger runbook <section>" in step2
    # 3. the same event again: answered from the idempotency table, nothing new anywhere
    assert re.search(
        r"^3\. EventBridge delivers the same event again \(id [0-9a-f-]+\): event_handler → status=processed.*\n"
        r"   Triages run: 0; findings written: 0; new Slack messages: 0; new emails: 0\.$",
        monitor,
        re.M,
    )
    # 4. a real-shaped Error Cluster Event fires the deployed Cluster Event rule (matched by moto's
    # EventBridge), reaches the handler and Slack; an Info event fires no rule
    step4 = monitor[monitor.index("\n4. ") : monitor.index("\n5. ")]
    assert re.search(r"^   Info: .* → no rule \(an Info event needs no triage\)$", step4, re.M)
    assert re.search(
        r"^   Error: Instance lifecycle script execution .* → the 'SageMaker HyperPod Cluster Event' rule$", step4, re.M
    )
    assert '"EventDetails": {' in step4 and '"EventLevel": "Error"' in step4 and '"account": ' in step4
    handled = re.search(r"^   event_handler → status=processed, transitions: NEW ×(\d+) \(triages run: 1;", step4, re.M)
    assert handled and int(handled.group(1)) > 0
    delivered = re.search(r"the courier delivered (\d+) Slack message\(s\) and (\d+) email\(s\)", step4)
    assert delivered and delivered.groups() == ("1", "1")
    # one incident for the node the event names: severity, verdict, node and cluster in its header
    named = re.search(r"the event names (i-[0-9a-f]+)\)", step4)
    assert named and re.search(rf"^  │ 🟠 P1 [A-Z ]+ {named.group(1)} \(gpu-workers\) · ml-eks-prod$", step4, re.M)
    # 5. the operator fixes a problem with the suggested command
    assert (
        "The operator runs the suggested command themselves (this tool never does): aws ec2 modify-vpc-attribute"
        in monitor
    )
    # 6. the sweep through the handlers resolves exactly that finding; Slack and email say so
    sweep = monitor[monitor.index("\n6. ") :]
    assert re.search(r"^   sweep_cluster → status=processed", sweep, re.M)
    assert re.search(r"^   The sweep's transitions \(whole cluster\): (?:\w+ ×\d+, )*RESOLVED ×1\.$", sweep, re.M)
    resent = re.search(r"the Slack sink received (\d+) more message\(s\) and (\d+) more email\(s\) arrived\.", sweep)
    assert resent and resent.groups() == ("1", "1")
    assert re.search(r"^  │ ✅ \*RESOLVED\* vpc\.dns: enableDnsHostnames is disabled", sweep, re.M)
    assert re.search(r"^  │ RESOLVED vpc\.dns: enableDnsHostnames is disabled", sweep, re.M)
    # 7. the history in DynamoDB
    assert re.search(r"Findings history for the cluster \(DynamoDB\): OPEN ×\d+, RESOLVED ×1$", sweep, re.M)


def test_the_monitor_part_is_skipped_with_a_note_without_the_handlers(monkeypatch):
    """An installed package without the repository's functions/: one line, and no AWS call at all."""
    from hyperpod_sim import monitor_demo

    for name in ("functions", "functions.monitor", "functions.monitor.handlers"):
        monkeypatch.setitem(sys.modules, name, None)  # what `import` finds when the package is absent
    text = monitor_demo.monitor_walkthrough(None, None, datetime.now(UTC))
    assert text.startswith("MONITOR: skipped.") and "make demo" in text
    assert text.count("\n") == 1


def test_every_node_gets_one_verdict_and_never_two_rungs(demo_json):
    import json

    for report in json.loads(demo_json):
        if report.get("probe_only") or "node_verdicts" not in report:
            continue
        verdicts = {v["instance_id"]: v for v in report["node_verdicts"]}
        assert len(verdicts) == len(report["node_verdicts"])  # one per node
        rungs: dict[str, set[str]] = {}
        for f in report["findings"]:
            if f.get("instance_id") and f["check"] != "ladder.batch":
                steps = {c["step"] for c in f["suggested_commands"] if c["step"] in ("reboot", "replace")}
                rungs.setdefault(f["instance_id"], set()).update(steps)
        for node, steps in rungs.items():
            assert len(steps) <= 1, (node, steps)
            if steps:
                assert verdicts[node]["verdict"] == next(iter(steps)), (node, verdicts[node])


@pytest.fixture(scope="module")
def demo_short() -> str:
    result = run_demo()
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_default_report_is_read_in_a_minute(demo_short):
    # the EKS cluster of 5 nodes with about five root causes: verdicts, cluster problems, one summary line
    eks = demo_short.split("=" * 100, 1)[0]
    assert demo_short.startswith("Starting a simulated AWS account")  # something shows at once
    eks = eks[eks.index("HyperPod triage: ") :]
    lines = eks.strip().splitlines()
    assert len(lines) <= 120, len(lines)
    assert lines[3].startswith("== Node verdicts")
    verdicts = eks.split("== Cluster-level problems ==", 1)[0]
    assert re.search(r"^REPLACE\s+i-008b27c44a8f23815", verdicts, re.M)
    assert "batch-reboot-cluster-nodes" not in verdicts.split("REPLACE", 1)[1].split("\n", 4)[-1].split("\n")[0]
    problems = eks.split("== Cluster-level problems ==", 1)[1].split("== Summary ==", 1)[0]
    for line in problems.splitlines():
        if line.startswith("["):
            assert " → references/node-diagnostics-detail.md § " in line, line
    assert "--verbose" in eks


def test_the_default_slurm_report_shows_every_problem_its_summary_counts(demo_short):
    # the Slurm node's verdict is a reboot for the Xid the health agent saw; its full root volume and stopped
    # slurmd (the P0s, which a reboot does not fix) are named under it, not left to --verbose
    slurm = demo_short.split("HyperPod triage: ml-slurm-train", 1)[1].split("=" * 100, 1)[0]
    verdicts = slurm.split("== Cluster-level problems ==", 1)[0]
    rebooted = verdicts.split("REBOOT", 2)[1]
    assert re.search(
        r"^    worst: \[FAIL\] P0 Root volume / is 9\d% full .*; a reboot does not fix it$", rebooted, re.M
    )
    assert re.search(
        r"^    a reboot does not fix these either:\n      \[FAIL\] P0 slurmd is not running", rebooted, re.M
    )
    assert re.search(r"^    a reboot clears too:\n      \[WARN\] P1 row remapping pending", rebooted, re.M)
    assert "scontrol update nodename=ip-" in rebooted and "batch-reboot-cluster-nodes" in rebooted  # the rung stays
    # the summary counts what is on screen: as many P0 and P1 lines as it says
    counted = re.search(r"^P0 (\d+) · P1 (\d+) · P2 (\d+) · passed", slurm, re.M)
    assert counted and "more problem(s) with --verbose" not in slurm
    for priority, n in zip(("P0", "P1", "P2"), counted.groups(), strict=True):
        on_screen = len(
            re.findall(rf"(?:^|\s)(?:\[(?:FAIL|WARN|UNKNOWN)\] )?{priority} ", slurm.split("== Summary ==")[0])
        )
        assert on_screen >= int(n), (priority, on_screen, n)
    assert int(counted.group(1)) == 2


def test_the_demo_account_can_be_kept_and_used_from_another_shell():
    """`hyperpod-debugger demo --serve` (README): the simulated account stays up; the exported lines it prints
    point a CLI in another process at it, as a user pastes them into another shell."""
    import os
    import signal
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    server = subprocess.Popen(
        [sys.executable, "-m", "hyperpod_debugger.cli", "demo", "--serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert server.stdout is not None
        exported: dict[str, str] = {}
        for line in server.stdout:
            if line.startswith("export "):
                name, _, value = line.removeprefix("export ").strip().partition("=")
                exported[name] = value
            if line.startswith("Ctrl-C stops it."):
                break
        assert {"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SSM", "AWS_DEFAULT_REGION"} <= set(exported)
        triage = subprocess.run(
            [sys.executable, "-m", "hyperpod_debugger.cli", "triage", "--cluster", "ml-slurm-train", "--json"],
            capture_output=True,
            text=True,
            env={**env, **exported},
            cwd=ROOT,
            timeout=300,
            check=False,
        )
        import json

        report = json.loads(triage.stdout)
        assert triage.returncode == 1 == report["exit_code"] and report["error"] is None
        assert report["cluster"]["orchestrator"] == "Slurm" and report["coverage"]["probed_nodes"]  # SSM too
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    assert server.returncode == 0 and "stopped" in (server.stderr.read() if server.stderr else "")
