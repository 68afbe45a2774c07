"""The ``hyperpod-debugger`` command line: triage, probe, analyze, findings, demo, schema, iam-policy."""
