from __future__ import annotations

from datetime import UTC, datetime

import pytest
from moto import mock_aws

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_sim import moto_patches, scenarios


@pytest.fixture
def now() -> datetime:
    return datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def aws():
    moto_patches.apply()
    with mock_aws():
        yield


@pytest.fixture
def clients(aws) -> AwsClients:
    return AwsClients(scenarios.REGION, max_attempts=1)


@pytest.fixture
def demo(clients, now):
    return scenarios.seed_demo(AwsClients(scenarios.REGION, max_attempts=1), now)
