"""VPC checks (runbook sections B.1 to B.4): alignment, addressing, DNS, routing, endpoints, ENIs.

One module per concern: :mod:`.alignment`, :mod:`.addresses` (free IPs, the ENI quota), :mod:`.dns`,
:mod:`.routing`, :mod:`.endpoints`; names, thresholds and helpers in :mod:`.common`.
"""

from __future__ import annotations

from hyperpod_debugger.checks.vpc.addresses import check_eni_quota, check_subnet_ips
from hyperpod_debugger.checks.vpc.alignment import check_alignment
from hyperpod_debugger.checks.vpc.common import (
    CHECK_ALIGNMENT,
    CHECK_DNS,
    CHECK_ENDPOINTS,
    CHECK_ENI_QUOTA,
    CHECK_ROUTING,
    CHECK_SUBNET_IPS,
)
from hyperpod_debugger.checks.vpc.dns import check_dns
from hyperpod_debugger.checks.vpc.endpoints import check_endpoints
from hyperpod_debugger.checks.vpc.routing import check_routing
from hyperpod_debugger.domain.checking import Check

CHECKS: tuple[Check, ...] = (
    Check(
        id=CHECK_ALIGNMENT,
        section="B.1",
        title="Subnet and security-group VPC alignment",
        run=check_alignment,
    ),
    Check(id=CHECK_SUBNET_IPS, section="B.1", title="Free IP addresses per subnet", run=check_subnet_ips),
    Check(id=CHECK_DNS, section="B.2", title="VPC DNS attributes", run=check_dns),
    Check(
        id=CHECK_ROUTING,
        section="B.3",
        title="Private subnets (no default route to an IGW)",
        run=check_routing,
    ),
    Check(id=CHECK_ENDPOINTS, section="B.4", title="VPC endpoints for isolated subnets", run=check_endpoints),
    Check(
        id=CHECK_ENI_QUOTA,
        section="B.1",
        title="Network interfaces against the regional quota",
        run=check_eni_quota,
    ),
)

__all__ = [
    "CHECKS",
    "check_alignment",
    "check_dns",
    "check_endpoints",
    "check_eni_quota",
    "check_routing",
    "check_subnet_ips",
]
