"""A simulated AWS account for HyperPod Node Debugger: moto (patched where it differs from AWS, see
:mod:`hyperpod_sim.moto_patches`), a fake Session Manager service and agent, a fake Kubernetes API, a
Slack webhook sink and the harness that runs the monitor's Lambda handlers in-process.

A distribution of its own (``sim/pyproject.toml``): the core ``hyperpod_debugger`` never imports it,
and the Lambda layer never carries it. It may import the repository's ``functions/`` for the local
end-to-end run.
"""
