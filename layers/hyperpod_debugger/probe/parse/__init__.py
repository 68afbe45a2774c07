"""Parsers of the probe's raw tool output (nvidia-smi, kernel logs, system files); no verdicts here."""
