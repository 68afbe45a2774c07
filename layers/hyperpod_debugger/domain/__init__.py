"""Domain types: findings and reports, observations, runbook sections, Xid codes, identifiers, HyperPod's events;
the instance catalog, how a check runs, and the suggested-command builders. Imports nothing above it."""
