"""What to do about a finding: the investigate → reboot → replace ladder, suggested commands, IaC ownership."""
