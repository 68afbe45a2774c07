"""Instance-type naming shared by adapters and checks."""

from __future__ import annotations


def ec2_type(instance_type: str) -> str:
    """HyperPod types carry an ``ml.`` prefix that EC2 does not know (``ml.p5.48xlarge`` -> ``p5.48xlarge``)."""
    return instance_type[3:] if instance_type.startswith("ml.") else instance_type
