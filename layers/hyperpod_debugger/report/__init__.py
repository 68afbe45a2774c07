"""What people and agents read: the triage report (terminal text and JSON), the offline analysis of a probe
document, the findings table's contents and its review, the runbook's sections and the support-case draft."""
