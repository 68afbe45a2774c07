"""AWS clients per Region, built on first use and reused across warm invocations (never at import).

``clear()`` forgets them (tests do, between simulated accounts; ``env.clear_env_cache`` calls it).
"""

from __future__ import annotations

from functools import lru_cache

from hyperpod_debugger.aws.clients import AwsClients


@lru_cache(maxsize=8)
def clients(region: str) -> AwsClients:
    return AwsClients(region)


@lru_cache(maxsize=8)
def bookkeeping_clients(region: str) -> AwsClients:
    """For bookkeeping that must never stall a delivery (the ledger): two attempts in all (botocore's
    ``max_attempts`` counts the retries), short timeouts."""
    return AwsClients(region, max_attempts=1, connect_timeout=2.0, read_timeout=3.0)


def clear() -> None:
    clients.cache_clear()
    bookkeeping_clients.cache_clear()
