"""The rehearsal: the synthesized stack run as AWS runs it, on the simulated account.

* :mod:`.template`: a template read as CloudFormation reads it (intrinsics, conditions, rules, order).
* :mod:`.deploy`: its resources created on moto from their resolved properties, assets published.
* :mod:`.runtime`: the Lambda service: each invocation a clean process of the runtime the template names.
* :mod:`.sources`: event source mappings and EventBridge rules, applied as Lambda and EventBridge do.
* :mod:`.faults`: an AWS API that throttles.
* :mod:`.calls` and :mod:`.iam_eval`: every call a function makes, checked against its role's policy.
* :mod:`.stage`: all of it around the demo's account (``rehearsal(cdk_out, host_layer=…)``).

The tests are ``tests/rehearsal`` (``make rehearse``).
"""
