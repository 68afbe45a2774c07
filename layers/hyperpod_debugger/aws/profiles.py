"""The AWS CLI's own configuration, read the way the CLI reads it: named profiles (``--profile`` or
``AWS_PROFILE``), each profile's Region, and which partition each Region belongs to, from the endpoint
data botocore ships (aws, aws-cn, aws-us-gov, ...). Nothing here makes a network call."""

from __future__ import annotations

import difflib
from functools import lru_cache

import botocore.session
from botocore.exceptions import BotoCoreError, ProfileNotFound

from hyperpod_debugger.domain.validate import InvalidArgument


def _session(profile: str | None) -> botocore.session.Session:
    return botocore.session.Session(profile=profile) if profile else botocore.session.Session()


def known_profiles() -> list[str]:
    try:
        return sorted(botocore.session.Session(profile=None).available_profiles)
    except BotoCoreError:
        return []


def profile_region(profile: str | None) -> str | None:
    """The Region the profile's configuration names (``region =`` in ``~/.aws/config``), or None.

    Raises :class:`InvalidArgument` for a profile that does not exist, saying which do."""
    try:
        value = _session(profile).get_config_variable("region")
    except ProfileNotFound as exc:
        name = profile or str(exc.kwargs.get("profile") or "?")
        known = known_profiles()
        hint = f"the profiles configured here: {', '.join(known)}" if known else "no profile is configured here"
        raise InvalidArgument(
            f"profile {name!r} not found in ~/.aws/config or ~/.aws/credentials ({hint}); "
            "pass --profile with one of them, or run `aws configure --profile <name>`"
        ) from None
    return str(value) if value else None


@lru_cache(maxsize=1)
def _partitions() -> dict[str, frozenset[str]]:
    data = botocore.session.get_session().get_data("endpoints")
    return {p["partition"]: frozenset(p.get("regions", {})) for p in data.get("partitions", [])}


def partition_of(region: str) -> str | None:
    """The partition whose endpoint data lists ``region`` (``aws``, ``aws-cn``, ``aws-us-gov``, ...), or None."""
    return next((name for name, regions in _partitions().items() if region in regions), None)


def known_region(region: str) -> str:
    """``region`` when botocore's endpoint data lists it; else :class:`InvalidArgument` with the closest names
    (a misspelt Region would otherwise become an endpoint error after the SDK's retries)."""
    if partition_of(region) is not None:
        return region
    every = sorted(r for regions in _partitions().values() for r in regions)
    close = difflib.get_close_matches(region, every, n=3, cutoff=0.75)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise InvalidArgument(
        f"Region {region!r} is not in the AWS SDK's endpoint data{hint} (a Region newer than the installed "
        f"botocore {botocore.__version__} needs a newer botocore)"
    )
