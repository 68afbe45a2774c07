"""The triage report for people: the terminal text and the JSON document."""
