"""What the CLI's commands share: the help of ``--region`` and ``--profile`` (the Region they lead to:
:func:`hyperpod_debugger.aws.region.region_for`)."""

from __future__ import annotations

REGION_HELP = "AWS Region (default: the cluster ARN's, then AWS_REGION / AWS_DEFAULT_REGION, then the profile's)"
PROFILE_HELP = "named profile from ~/.aws/config (default: AWS_PROFILE, then the default profile)"
