"""The scheduled sweep as AWS runs it: the template's state machine definition executed by moto's ASL
interpreter, its Lambda tasks running the handlers from the synthesized asset under the template's runtime,
environment, timeout and memory, on the demo's two clusters (failing nodes included).

The expected findings are not written here: they are what the CLI (`run_triage`, the same core in this
process) reports for the same clusters, so the deployed path must reproduce the CLI's verdicts.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hyperpod_debugger.store.findings import FindingStore
from hyperpod_debugger.triage import TriageRequest, run_triage
from hyperpod_sim.monitor_demo import DEMO_PROBE
from hyperpod_sim.scenarios import REGION
from infra import constants as c


@pytest.fixture(scope="module")
def sweep(stage):
    return stage.sweep()


def _keys(findings) -> set[tuple[str | None, str, str]]:
    return {(f.instance_id, f.check, str(f.tag)) for f in findings}


def test_the_schedule_input_runs_the_sweep_to_success(stage, sweep):
    assert sweep.status == "SUCCEEDED", (sweep.error, sweep.cause)
    names = {i.function for i in sweep.invocations}
    assert names == {
        stage.deployment.function_name(c.SWEEP_HANDLER),
        stage.deployment.function_name(c.PROBE_BATCH_HANDLER),
    }
    failed = [(i.function, i.error, i.log[-2000:]) for i in sweep.invocations if not i.ok]
    assert not failed


def test_each_allowlisted_cluster_is_stepped_and_its_nodes_probed(stage, sweep):
    steps = [i.payload for i in sweep.invocations if i.function == stage.deployment.function_name(c.SWEEP_HANDLER)]
    assert sorted(s["cluster"] for s in steps) == sorted([stage.demo.eks.name, stage.demo.slurm.name])
    assert {s["status"] for s in steps} == {"processed"}
    batches = [i for i in sweep.invocations if i.function == stage.deployment.function_name(c.PROBE_BATCH_HANDLER)]
    # one probe batch per planned batch, each fed by the Map state from the cluster step's output
    assert len(batches) == sum(len(s["batches"]) for s in steps) > 0
    assert all(b.payload["status"] == "processed" and b.payload["probed"] > 0 for b in batches)


def test_the_stored_findings_are_the_ones_the_cli_reports(stage, sweep):
    store = FindingStore(stage.clients, stage.findings_table)
    now = datetime.now(UTC)
    for cluster in (stage.demo.eks, stage.demo.slurm):
        report = run_triage(
            TriageRequest(cluster=cluster.name, region=REGION, now=now, probe=True, probe_options=DEMO_PROBE)
        )
        stored = store.open_findings(cluster.arn).values()
        assert _keys(stored) == _keys(f for f in report.findings if f.is_problem), cluster.name


def test_every_invocation_stays_inside_the_templates_memory(stage, sweep):
    # (the template's timeout is enforced by the runtime itself: a longer run fails as Sandbox.Timedout)
    for invocation in sweep.invocations:
        props = stage.deployment.function_properties(invocation.function)
        assert 0 < invocation.max_rss_mib < int(props["MemorySize"])


def test_every_resource_of_the_template_was_created_or_applied(stage):
    assert stage.deployment.not_modelled == []
    assert set(stage.deployment.refs) == set(stage.deployment.template.resources)


def test_without_an_access_entry_the_kubernetes_checks_are_unknown_and_resolve_nothing(stage):
    from hyperpod_debugger.domain.model import Tag
    from hyperpod_sim.rehearsal.stage import admit_access_entries

    store = FindingStore(stage.clients, stage.findings_table)

    def kubernetes_findings():
        found = store.open_findings(stage.demo.eks.arn).values()
        return [f for f in found if f.check.startswith("k8s.") and f.instance_id is None]

    failing_before = {f.fingerprint for f in kubernetes_findings() if f.tag is Tag.FAIL}
    stage.kubernetes.secret_key = lambda access_key: None  # as if eksClusters had not been set: EKS answers 401
    try:
        run = stage.sweep()
    finally:
        admit_access_entries(stage.kubernetes, stage.deployment)
    assert run.status == "SUCCEEDED"
    after = kubernetes_findings()
    unknown = [f for f in after if f.tag is Tag.UNKNOWN]
    assert unknown and all("access denied" in f.message for f in unknown)
    # a check that could not look resolves nothing: what was failing before is still open
    assert failing_before and failing_before <= {f.fingerprint for f in after if f.tag is Tag.FAIL}
