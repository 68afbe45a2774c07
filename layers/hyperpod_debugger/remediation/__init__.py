"""What to do about a finding: the investigate → reboot → replace ladder, node verdicts, root causes, IaC
ownership."""
