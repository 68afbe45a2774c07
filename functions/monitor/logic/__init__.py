"""The monitor's orchestration, pure: no event, no Lambda context, no boto3. Each handler calls one
function here over ports it injects (the store, the channels, the outbox, the triage).

* :mod:`.signals`: a HyperPod event → what to triage → the store's transitions.
* :mod:`.sweep`: the sweep's cluster step (checks and the probe plan) and its probe batches.
* :mod:`.alerts`: what the findings stream tells (transitions, armed clusters) → deliveries → rendered messages.
* :mod:`.stream`: the notifier, one batch of read stream records → messages queued in the outbox, groups armed.
* :mod:`.alert_groups`: a cluster's alert group, armed and flushed; the daily summary.
* :mod:`.windows`: a cluster's window of events → its one triage.
* :mod:`.outbox`: outbox messages, and the courier's one attempt per message with its backoff.

Nothing is imported here, so a function loads only the part it runs.
"""
