"""EC2 network and instance-type reads (describe only)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from hyperpod_debugger.aws.errors import ApiCallError, call
from hyperpod_debugger.aws.paginate import collect_all, pages
from hyperpod_debugger.domain.aws_types import ec2_type
from hyperpod_debugger.domain.observations import (
    InstanceTypeInfo,
    Route,
    RouteTable,
    SecurityGroup,
    SgRule,
    Subnet,
    Vpc,
    VpcEndpoint,
)

if TYPE_CHECKING:
    from hyperpod_debugger.aws.clients import AwsClients

SERVICE = "ec2"


def _tags(raw: Any) -> dict[str, str]:
    return {str(t.get("Key")): str(t.get("Value", "")) for t in raw or () if isinstance(t, dict)}


def _rule(raw: dict[str, Any]) -> SgRule:
    return SgRule(
        protocol=str(raw.get("IpProtocol", "")),
        from_port=raw.get("FromPort"),
        to_port=raw.get("ToPort"),
        ipv4_ranges=tuple(str(r.get("CidrIp")) for r in raw.get("IpRanges") or () if r.get("CidrIp")),
        ipv6_ranges=tuple(str(r.get("CidrIpv6")) for r in raw.get("Ipv6Ranges") or () if r.get("CidrIpv6")),
        group_ids=tuple(str(p.get("GroupId")) for p in raw.get("UserIdGroupPairs") or () if p.get("GroupId")),
        prefix_lists=tuple(str(p.get("PrefixListId")) for p in raw.get("PrefixListIds") or () if p.get("PrefixListId")),
    )


def _sg(raw: dict[str, Any]) -> SecurityGroup:
    return SecurityGroup(
        group_id=str(raw["GroupId"]),
        name=str(raw.get("GroupName", "")),
        vpc_id=raw.get("VpcId"),
        ingress=tuple(_rule(r) for r in raw.get("IpPermissions") or ()),
        egress=tuple(_rule(r) for r in raw.get("IpPermissionsEgress") or ()),
        tags=_tags(raw.get("Tags")),
    )


def describe_security_groups(
    clients: AwsClients, group_ids: Iterable[str]
) -> tuple[dict[str, SecurityGroup], list[str]]:
    """(found groups, ids EC2 says do not exist). A stale id fails the whole batch call, so
    on ``InvalidGroup.NotFound`` each id is asked for on its own to name the missing one."""
    ids = list(dict.fromkeys(group_ids))
    if not ids:
        return {}, []
    client = clients.client(SERVICE)
    action = "ec2:DescribeSecurityGroups"
    try:
        raw = collect_all(client, action, "describe_security_groups", "SecurityGroups", GroupIds=ids)
        return {g.group_id: g for g in map(_sg, raw)}, []
    except ApiCallError as exc:
        if exc.failure.kind != "not_found":
            raise
    found: dict[str, SecurityGroup] = {}
    missing: list[str] = []
    for group_id in ids:
        try:
            raw = collect_all(client, action, "describe_security_groups", "SecurityGroups", GroupIds=[group_id])
        except ApiCallError as exc:
            if exc.failure.kind != "not_found":
                raise
            missing.append(group_id)
            continue
        found.update({g.group_id: g for g in map(_sg, raw)})
    return found, missing


def describe_subnets(clients: AwsClients, subnet_ids: Iterable[str]) -> dict[str, Subnet]:
    ids = list(dict.fromkeys(subnet_ids))
    if not ids:
        return {}
    raw = collect_all(clients.client(SERVICE), "ec2:DescribeSubnets", "describe_subnets", "Subnets", SubnetIds=ids)
    return {
        s["SubnetId"]: Subnet(
            subnet_id=s["SubnetId"],
            vpc_id=str(s.get("VpcId", "")),
            availability_zone=str(s.get("AvailabilityZone", "")),
            availability_zone_id=s.get("AvailabilityZoneId"),
            available_ips=int(s.get("AvailableIpAddressCount", 0)),
            cidr=s.get("CidrBlock"),
            tags=_tags(s.get("Tags")),
        )
        for s in raw
    }


def vpc_tags(clients: AwsClients, vpc_ids: Iterable[str]) -> dict[str, dict[str, str]]:
    ids = list(dict.fromkeys(vpc_ids))
    if not ids:
        return {}
    raw = collect_all(clients.client(SERVICE), "ec2:DescribeVpcs", "describe_vpcs", "Vpcs", VpcIds=ids)
    return {str(v["VpcId"]): _tags(v.get("Tags")) for v in raw}


def describe_vpc(clients: AwsClients, vpc_id: str, tags: dict[str, str] | None = None) -> Vpc:
    """DNS attributes need one call each; a denied attribute reads as None, not False."""
    client = clients.client(SERVICE)
    values: dict[str, bool | None] = {}
    for attribute, key in (("enableDnsSupport", "EnableDnsSupport"), ("enableDnsHostnames", "EnableDnsHostnames")):
        raw = call(client, "ec2:DescribeVpcAttribute", "describe_vpc_attribute", VpcId=vpc_id, Attribute=attribute)
        value = (raw.get(key) or {}).get("Value")
        values[attribute] = value if isinstance(value, bool) else None
    return Vpc(
        vpc_id=vpc_id,
        dns_support=values["enableDnsSupport"],
        dns_hostnames=values["enableDnsHostnames"],
        tags=tags or {},
    )


def _route_target(raw: dict[str, Any]) -> str:
    for key in (
        "GatewayId",
        "NatGatewayId",
        "TransitGatewayId",
        "VpcPeeringConnectionId",
        "NetworkInterfaceId",
        "InstanceId",
        "EgressOnlyInternetGatewayId",
        "LocalGatewayId",
        "CarrierGatewayId",
        "CoreNetworkArn",
    ):
        if raw.get(key):
            return str(raw[key])
    return "unknown"


def describe_route_tables(clients: AwsClients, vpc_ids: Iterable[str]) -> list[RouteTable]:
    ids = list(dict.fromkeys(vpc_ids))
    if not ids:
        return []
    raw = collect_all(
        clients.client(SERVICE),
        "ec2:DescribeRouteTables",
        "describe_route_tables",
        "RouteTables",
        Filters=[{"Name": "vpc-id", "Values": ids}],
    )
    tables = []
    for t in raw:
        associations = t.get("Associations") or []
        routes = tuple(
            Route(
                destination=str(
                    r.get("DestinationCidrBlock")
                    or r.get("DestinationIpv6CidrBlock")
                    or r.get("DestinationPrefixListId")
                ),
                target=_route_target(r),
                state=r.get("State"),
            )
            for r in t.get("Routes") or ()
        )
        tables.append(
            RouteTable(
                route_table_id=str(t["RouteTableId"]),
                vpc_id=str(t.get("VpcId", "")),
                main=any(a.get("Main") for a in associations),
                subnet_ids=tuple(str(a["SubnetId"]) for a in associations if a.get("SubnetId")),
                routes=routes,
            )
        )
    return tables


def describe_vpc_endpoints(clients: AwsClients, vpc_ids: Iterable[str]) -> list[VpcEndpoint]:
    ids = list(dict.fromkeys(vpc_ids))
    if not ids:
        return []
    raw = collect_all(
        clients.client(SERVICE),
        "ec2:DescribeVpcEndpoints",
        "describe_vpc_endpoints",
        "VpcEndpoints",
        Filters=[{"Name": "vpc-id", "Values": ids}],
    )
    return [
        VpcEndpoint(
            endpoint_id=str(e.get("VpcEndpointId", "")),
            service_name=str(e.get("ServiceName", "")),
            endpoint_type=str(e.get("VpcEndpointType", "")),
            state=str(e.get("State", "")).lower(),
            route_table_ids=tuple(e.get("RouteTableIds") or ()),
            private_dns=e.get("PrivateDnsEnabled"),
        )
        for e in raw
    ]


def count_network_interfaces(clients: AwsClients) -> int:
    """Region-wide ENI count, to compare with the regional quota (the quota is per Region)."""
    total = 0
    for page in pages(
        clients.client(SERVICE),
        "ec2:DescribeNetworkInterfaces",
        "describe_network_interfaces",
        "NetworkInterfaces",
        MaxResults=1000,
    ):
        total += len(page)
    return total


def _type_info(raw: dict[str, Any]) -> InstanceTypeInfo:
    vcpu = raw.get("VCpuInfo") or {}
    gpus = (raw.get("GpuInfo") or {}).get("Gpus") or []
    network = raw.get("NetworkInfo") or {}
    return InstanceTypeInfo(
        instance_type=str(raw["InstanceType"]),
        default_vcpus=int(vcpu.get("DefaultVCpus", 0)),
        default_cores=vcpu.get("DefaultCores"),
        default_threads_per_core=vcpu.get("DefaultThreadsPerCore"),
        valid_threads_per_core=tuple(vcpu.get("ValidThreadsPerCore") or ()),
        efa_supported=network.get("EfaSupported"),
        gpus=sum(int(g.get("Count", 0)) for g in gpus) if gpus else None,
    )


def describe_instance_types(clients: AwsClients, instance_types: Iterable[str]) -> dict[str, InstanceTypeInfo]:
    """Known types by EC2 name. A type EC2 does not know fails the batch, so retry one by one."""
    names = list(dict.fromkeys(ec2_type(t) for t in instance_types if t))
    if not names:
        return {}
    client = clients.client(SERVICE)
    action = "ec2:DescribeInstanceTypes"
    try:
        raw = collect_all(client, action, "describe_instance_types", "InstanceTypes", InstanceTypes=names)
        return {i.instance_type: i for i in map(_type_info, raw)}
    except ApiCallError as exc:
        if exc.failure.kind != "not_found" or len(names) == 1:
            if exc.failure.kind == "not_found":
                return {}
            raise
    found: dict[str, InstanceTypeInfo] = {}
    for name in names:
        try:
            raw = collect_all(client, action, "describe_instance_types", "InstanceTypes", InstanceTypes=[name])
        except ApiCallError as exc:
            if exc.failure.kind != "not_found":
                raise
            continue
        found.update({i.instance_type: i for i in map(_type_info, raw)})
    return found


def describe_offerings(clients: AwsClients, instance_types: Iterable[str]) -> dict[str, frozenset[str]]:
    """EC2 type -> the AZ names that offer it in this Region."""
    names = list(dict.fromkeys(ec2_type(t) for t in instance_types if t))
    if not names:
        return {}
    raw = collect_all(
        clients.client(SERVICE),
        "ec2:DescribeInstanceTypeOfferings",
        "describe_instance_type_offerings",
        "InstanceTypeOfferings",
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": names}],
    )
    offered: dict[str, set[str]] = {name: set() for name in names}
    for item in raw:
        offered.setdefault(str(item.get("InstanceType")), set()).add(str(item.get("Location")))
    return {name: frozenset(azs) for name, azs in offered.items()}
