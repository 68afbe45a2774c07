"""The failure paths of the deployed stack, run as AWS runs them: what the template's Retry and Catch,
Lambda's timeout, a throttled SageMaker API and a Slack outage do to a sweep and to an alert."""

from __future__ import annotations

from hyperpod_sim.rehearsal.faults import throttled
from hyperpod_sim.rehearsal.runtime import Fault
from infra import constants as c


def _task_errors(run) -> set[str]:
    """The errors the history's failed Lambda tasks carry (each test makes one function fail)."""
    return {e["lambdaFunctionFailedEventDetails"]["error"] for e in run.states("LambdaFunctionFailed")}


def test_a_failing_cluster_step_is_retried_then_caught_and_the_sweep_still_ends(stage):
    function = stage.deployment.function_name(c.SWEEP_HANDLER)
    stage.lambdas.faults[function] = Fault(environment={"FINDINGS_TABLE": "no-such-table"}, times=100)
    try:
        run = stage.sweep()
    finally:
        stage.lambdas.faults.pop(function, None)
    assert run.status == "SUCCEEDED", (run.error, run.cause)
    steps = [i for i in run.invocations if i.function == function]
    # two clusters, each tried once and retried twice (Retry States.TaskFailed, MaxAttempts 2), then caught
    assert len(steps) == 6 and not any(i.ok for i in steps)
    assert _task_errors(run) == {"ApiCallError"}
    assert _entered(run, "ClusterFailed") == 2


def _entered(run, state: str) -> int:
    return sum(1 for e in run.history if e.get("stateEnteredEventDetails", {}).get("name") == state)


def test_a_probe_batch_that_runs_past_its_timeout_is_caught_without_failing_the_sweep(stage):
    function = stage.deployment.function_name(c.PROBE_BATCH_HANDLER)
    stage.lambdas.faults[function] = Fault(timeout_s=0.5, times=100)
    try:
        run = stage.sweep()
    finally:
        stage.lambdas.faults.pop(function, None)
    assert run.status == "SUCCEEDED", (run.error, run.cause)
    batches = [i for i in run.invocations if i.function == function]
    assert batches and all(i.error and i.error["errorType"] == "Sandbox.Timedout" for i in batches)
    # a timeout is not one of the Lambda service errors the ProbeNodes task retries: caught at once
    assert _task_errors(run) == {"Sandbox.Timedout"}
    assert _entered(run, "BatchFailed") == len(batches)
    # the cluster steps themselves went through
    steps = [i for i in run.invocations if i.function == stage.deployment.function_name(c.SWEEP_HANDLER)]
    assert len(steps) == 2 and all(i.ok for i in steps)


def test_a_throttled_list_clusters_is_retried_by_the_state_machine(stage):
    with throttled("sagemaker", "ListClusters", times=2) as throttle:
        run = stage.sweep()
    assert throttle.answered == 2
    assert run.status == "SUCCEEDED", (run.error, run.cause)
    assert _entered(run, "ClusterDone") == 2


def test_throttled_cluster_reads_inside_a_handler_are_retried_by_the_sdk(stage):
    with throttled("sagemaker", "ListClusterNodes", times=2) as throttle:
        run = stage.sweep()
    assert throttle.answered == 2
    assert run.status == "SUCCEEDED"
    steps = [i for i in run.invocations if i.function == stage.deployment.function_name(c.SWEEP_HANDLER)]
    assert len(steps) == 2 and all(i.ok and i.payload["status"] == "processed" for i in steps)


def test_a_slack_outage_delays_its_message_loses_nothing_and_does_not_hold_email_back(stage):
    stage.slack.outage(503)
    stage.sweep()  # findings, hence incidents, hence one message per channel for each of the two clusters
    stage.run_for(20)  # the courier's first retries (1, 2, 4, 8 s) all meet the outage
    assert stage.slack.received == []
    # email is a FIFO group of its own (per channel and cluster): it did not wait for Slack
    assert sorted(e.subject.split(":")[0] for e in stage.emails()) == [
        f"[HyperPod P0] {stage.demo.eks.name}",
        f"[HyperPod P0] {stage.demo.slurm.name}",
    ]
    outbox = stage.queue_url("NotificationsOutbox")
    sqs = stage.clients.client("sqs")
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    waiting = sqs.get_queue_attributes(QueueUrl=outbox, AttributeNames=names)["Attributes"]
    assert sum(int(v) for v in waiting.values()) == 2  # the Slack messages, kept for a later try
    assert stage.queue_messages("NotificationsOutboxDlq") == []

    stage.slack.outage(None)
    # the courier's backoff is now 15 minutes: end that wait for each waiting message, as time would
    stage.expire_visibility(outbox)
    stage.settle()
    assert sorted(m["text"].split(":")[0] for m in stage.slack.received) == [
        f"🔴 {stage.demo.eks.name}",
        f"🔴 {stage.demo.slurm.name}",
    ]
