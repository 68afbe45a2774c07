"""Names, thresholds and helpers the VPC checks share."""

from __future__ import annotations

from hyperpod_debugger.domain.observations import (
    ClusterObservation,
    NotApplicable,
    Route,
    RouteTable,
    Subnet,
    VpcConfig,
)

CHECK_ALIGNMENT = "vpc.alignment"
CHECK_SUBNET_IPS = "vpc.subnet_ips"
CHECK_DNS = "vpc.dns"
CHECK_ROUTING = "vpc.routing"
CHECK_ENDPOINTS = "vpc.endpoints"
CHECK_ENI_QUOTA = "vpc.eni_quota"

#: free addresses below which a subnet cannot take one more node reliably / is running short
IPS_CRITICAL = 5
IPS_LOW = 50

#: Service Quotas code of "Network interfaces per Region" (EC2)
ENI_QUOTA_CODE = "L-DF5E4CA3"
ENI_FAIL_RATIO = 0.95
ENI_WARN_RATIO = 0.80

DEFAULT_DESTINATIONS = ("0.0.0.0/0", "::/0")

#: endpoint service suffixes an isolated HyperPod subnet needs (``com.amazonaws.<region>.<suffix>``)
REQUIRED_ENDPOINTS = (
    "s3",
    "ecr.api",
    "ecr.dkr",
    "sts",
    "ssm",
    "ssmmessages",
    "ec2messages",
    "ec2",
    "sagemaker.api",
    "sagemaker.runtime",
    "logs",
)
EKS_ENDPOINT = "eks"
OPTIONAL_ENDPOINTS = ("fsx",)


def distinct_configs(obs: ClusterObservation) -> list[tuple[str, VpcConfig]]:
    """Each distinct VpcConfig once, labelled with who uses it."""
    owners: dict[VpcConfig, list[str]] = {}
    for group_name, cfg in obs.cluster.all_vpc_configs():
        owners.setdefault(cfg, []).append("cluster VpcConfig" if group_name is None else f"{group_name} override")
    return [(", ".join(names), cfg) for cfg, names in owners.items()]


def require_subnet_ids(obs: ClusterObservation) -> list[str]:
    subnet_ids = obs.cluster.subnet_ids()
    if not subnet_ids:
        raise NotApplicable("the cluster has no VpcConfig subnets to inspect")
    return subnet_ids


def subnet_line(sn: Subnet) -> str:
    return f"{sn.subnet_id} {sn.vpc_id} az={sn.availability_zone} free_ips={sn.available_ips} cidr={sn.cidr or '-'}"


def active(route: Route) -> bool:
    return (route.state or "active").lower() != "blackhole"


def default_routes(table: RouteTable) -> list[Route]:
    return [r for r in table.routes if r.destination in DEFAULT_DESTINATIONS and active(r)]


def route_table_for(subnet_id: str, vpc_id: str | None, tables: list[RouteTable]) -> tuple[RouteTable | None, bool]:
    """The table a subnet uses and whether the association is implied (the VPC's main table)."""
    for table in tables:
        if subnet_id in table.subnet_ids:
            return table, False
    if vpc_id is not None:
        for table in tables:
            if table.main and table.vpc_id == vpc_id:
                return table, True
    return None, False


def route_line(subnet_id: str, table: RouteTable, implied: bool) -> str:
    how = f"main table of {table.vpc_id}, implied" if implied else "explicit association"
    defaults = ", ".join(f"{r.destination}->{r.target}" for r in default_routes(table)) or "no default route"
    return f"{subnet_id} -> {table.route_table_id} ({how}): {defaults}"


def _vpc_for(subnet_id: str, subnets: dict[str, Subnet]) -> str | None:
    sn = subnets.get(subnet_id)
    return sn.vpc_id if sn else None
