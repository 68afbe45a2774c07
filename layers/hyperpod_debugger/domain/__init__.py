"""Domain types: findings and reports, observations, runbook sections, Xid codes, identifiers, HyperPod's events."""
