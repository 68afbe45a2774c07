"""The findings table's stream as Lambda's DynamoDB event source hands it to the notifier, with the
template's settings: a failed batch bisected and retried, nothing lost, nothing in the dead-letter queue.
A module of its own: it needs the stream records of a fresh account's first sweep."""

from __future__ import annotations

from hyperpod_sim.rehearsal.runtime import Fault


def test_a_notifier_batch_that_fails_is_split_in_two_and_every_record_still_handed_over(stage):
    (mapping,) = stage.stream
    stage.sweep()  # the first sweep of a fresh account: its findings and incidents are new stream records
    function = mapping.function
    before = len(mapping.invocations)
    stage.lambdas.faults[function] = Fault(environment={"_HANDLER": "functions.monitor.handlers.stream.gone"}, times=1)
    stage.settle()
    tried = mapping.invocations[before:]
    assert not tried[0].ok and len(tried[0].event["Records"]) > 1
    first, second = tried[1], tried[2]
    # BisectBatchOnFunctionError: the two halves of the failed batch, in order, each handed over and handled
    assert first.event["Records"] + second.event["Records"] == tried[0].event["Records"]
    assert first.ok and second.ok
    assert mapping.failed_batches == []
    assert stage.queue_messages("NotificationsNotifierDlq") == []
