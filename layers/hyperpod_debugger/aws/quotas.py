"""Service Quotas reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperpod_debugger.aws.errors import ApiCallError, call
from hyperpod_debugger.domain.observations import ApiFailure

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients

#: "Network interfaces per Region" (EC2/VPC).
ENI_QUOTA = ("ec2", "L-DF5E4CA3")


def get_quota(clients: AwsClients, service_code: str, quota_code: str) -> float:
    raw = call(
        clients.client("service-quotas"),
        "servicequotas:GetServiceQuota",
        "get_service_quota",
        ServiceCode=service_code,
        QuotaCode=quota_code,
    )
    value = (raw.get("Quota") or {}).get("Value")
    if not isinstance(value, int | float):
        raise ApiCallError(ApiFailure("servicequotas:GetServiceQuota", "malformed", "no Quota.Value"))
    return float(value)
