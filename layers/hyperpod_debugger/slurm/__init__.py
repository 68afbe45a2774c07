"""Slurm in one place: parsing scontrol/sinfo/squeue output and the controller query through Session Manager."""
