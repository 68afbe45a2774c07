"""On-node probing: the read-only ``probe.sh``, its JSON document, and pure evaluators."""
