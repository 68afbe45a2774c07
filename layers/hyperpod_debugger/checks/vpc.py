"""VPC checks (runbook sections B.1 to B.4): alignment, addressing, DNS, routing, endpoints, ENIs."""

from __future__ import annotations

import math

from hyperpod_debugger.checks.base import Check, CheckContext, finding, trim_evidence
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag
from hyperpod_debugger.domain.observations import (
    ClusterObservation,
    NotApplicable,
    Route,
    RouteTable,
    Subnet,
    VpcConfig,
    VpcEndpoint,
)
from hyperpod_debugger.remediation.suggest import aws_argv, json_arg, mutating, read_only

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


# --------------------------------------------------------------------------- shared helpers


def distinct_configs(obs: ClusterObservation) -> list[tuple[str, VpcConfig]]:
    """Each distinct VpcConfig once, labelled with who uses it."""
    owners: dict[VpcConfig, list[str]] = {}
    for group_name, cfg in obs.cluster.all_vpc_configs():
        owners.setdefault(cfg, []).append(
            "cluster VpcConfig" if group_name is None else f"{group_name} override"
        )
    return [(", ".join(names), cfg) for cfg, names in owners.items()]


def require_subnet_ids(obs: ClusterObservation) -> list[str]:
    subnet_ids = obs.cluster.subnet_ids()
    if not subnet_ids:
        raise NotApplicable("the cluster has no VpcConfig subnets to inspect")
    return subnet_ids


def subnet_line(sn: Subnet) -> str:
    return (
        f"{sn.subnet_id} {sn.vpc_id} az={sn.availability_zone} "
        f"free_ips={sn.available_ips} cidr={sn.cidr or '-'}"
    )


def active(route: Route) -> bool:
    return (route.state or "active").lower() != "blackhole"


def default_routes(table: RouteTable) -> list[Route]:
    return [r for r in table.routes if r.destination in DEFAULT_DESTINATIONS and active(r)]


def route_table_for(
    subnet_id: str, vpc_id: str | None, tables: list[RouteTable]
) -> tuple[RouteTable | None, bool]:
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


# --------------------------------------------------------------------------- B.1 alignment


def check_alignment(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Subnets of one VpcConfig share one VPC, and the config's SGs live in that VPC."""
    configs = distinct_configs(obs)
    if not configs:
        return [
            finding(
                obs,
                CHECK_ALIGNMENT,
                Tag.WARN,
                "Cluster has no VpcConfig and no instance-group OverrideVpcConfig; VPC checks cannot run",
                priority=Priority.P2,
                section="B.1",
                root_cause="Without a customer VpcConfig the nodes use the service-managed network, so "
                "FSx, EFA security-group and private-subnet settings are not under your control.",
            )
        ]
    if not obs.cluster.subnet_ids():
        return [
            finding(
                obs,
                CHECK_ALIGNMENT,
                Tag.WARN,
                "Cluster VpcConfig lists no subnets; VPC alignment cannot be checked",
                priority=Priority.P2,
                section="B.1",
                evidence=[
                    f"{label}: security groups {', '.join(cfg.security_group_ids) or '-'}"
                    for label, cfg in configs
                ],
            )
        ]
    subnets = obs.network.subnets.get()
    sgs = obs.network.security_groups.get()
    region = obs.cluster.region
    findings: list[Finding] = []

    for label, cfg in configs:
        known = [subnets[s] for s in dict.fromkeys(cfg.subnet_ids) if s in subnets]
        unseen = [s for s in dict.fromkeys(cfg.subnet_ids) if s not in subnets]
        if unseen:
            findings.append(
                finding(
                    obs,
                    CHECK_ALIGNMENT,
                    Tag.UNKNOWN,
                    f"Subnet(s) {', '.join(unseen)} of {label} were not returned by ec2:DescribeSubnets",
                    priority=Priority.P2,
                    section="B.1",
                    evidence=[f"{s}: not described" for s in unseen],
                    suggested_commands=[
                        read_only(
                            aws_argv("ec2", "describe-subnets", region, "--subnet-ids", *unseen),
                            "Check whether the subnets still exist.",
                        )
                    ],
                )
            )
        vpcs = list(dict.fromkeys(sn.vpc_id for sn in known))
        subnet_evidence = [f"{sn.subnet_id} {sn.vpc_id}" for sn in known]
        if len(vpcs) > 1:
            findings.append(
                finding(
                    obs,
                    CHECK_ALIGNMENT,
                    Tag.FAIL,
                    f"Subnets of {label} span {len(vpcs)} VPCs ({', '.join(vpcs)}); they must share one VPC",
                    priority=Priority.P0,
                    section="B.1",
                    evidence=subnet_evidence,
                    root_cause="A HyperPod VpcConfig places every node of its groups in one VPC; subnets "
                    "from different VPCs cannot be used together.",
                    suggested_commands=[
                        read_only(
                            aws_argv(
                                "ec2",
                                "describe-subnets",
                                region,
                                "--subnet-ids",
                                *(sn.subnet_id for sn in known),
                            ),
                            "Show which VPC each subnet belongs to.",
                        )
                    ],
                )
            )
            continue
        if not vpcs:
            continue
        vpc_id = vpcs[0]
        wrong = [
            sgs[g]
            for g in dict.fromkeys(cfg.security_group_ids)
            if g in sgs and sgs[g].vpc_id is not None and sgs[g].vpc_id != vpc_id
        ]
        if wrong:
            findings.append(
                finding(
                    obs,
                    CHECK_ALIGNMENT,
                    Tag.FAIL,
                    f"Security group(s) {', '.join(sg.group_id for sg in wrong)} of {label} are not in "
                    f"{vpc_id}, the VPC of its subnets",
                    priority=Priority.P0,
                    section="B.1",
                    evidence=[*subnet_evidence, *(f"{sg.group_id} {sg.vpc_id}" for sg in wrong)],
                    root_cause="A security group can only be attached to network interfaces in its own VPC; "
                    "nodes cannot launch with a security group from another VPC.",
                    suggested_commands=[
                        read_only(
                            aws_argv(
                                "ec2",
                                "describe-security-groups",
                                region,
                                "--group-ids",
                                *(sg.group_id for sg in wrong),
                            ),
                            "Show the VPC of each security group.",
                        )
                    ],
                )
            )

    if not findings:
        lines = [
            f"{label}: {', '.join(dict.fromkeys(subnets[s].vpc_id for s in cfg.subnet_ids))} "
            f"subnets={','.join(cfg.subnet_ids)} sgs={','.join(cfg.security_group_ids)}"
            for label, cfg in configs
        ]
        findings.append(
            finding(
                obs,
                CHECK_ALIGNMENT,
                Tag.PASS,
                "Subnets and security groups of every VpcConfig share one VPC",
                section="B.1",
                evidence=trim_evidence(lines),
            )
        )
    return findings


# --------------------------------------------------------------------------- B.1 free addresses


def check_subnet_ips(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Free IPv4 addresses per HyperPod subnet."""
    subnet_ids = require_subnet_ids(obs)
    subnets = obs.network.subnets.get()
    known = [subnets[s] for s in subnet_ids if s in subnets]
    if not known:
        raise NotApplicable("none of the cluster's subnets was described (reported by vpc.alignment)")
    region = obs.cluster.region
    findings: list[Finding] = []
    for sn in known:
        if sn.available_ips >= IPS_LOW:
            continue
        critical = sn.available_ips < IPS_CRITICAL
        findings.append(
            finding(
                obs,
                CHECK_SUBNET_IPS,
                Tag.FAIL if critical else Tag.WARN,
                f"Subnet {sn.subnet_id} ({sn.availability_zone}) has only "
                f"{sn.available_ips} free IP address(es)"
                + (
                    "; new nodes will fail to launch"
                    if critical
                    else "; consider a larger or additional subnet"
                ),
                priority=Priority.P1 if critical else Priority.P2,
                section="B.1",
                evidence=[subnet_line(sn)],
                root_cause="Every node consumes addresses for its network interfaces (and, on EKS, for the "
                "pod addresses the VPC CNI keeps warm); an exhausted subnet blocks scaling and "
                "replacement.",
                suggested_commands=[
                    read_only(
                        aws_argv("ec2", "describe-subnets", region, "--subnet-ids", sn.subnet_id),
                        "Re-read the free address count of the subnet.",
                    )
                ],
            )
        )
    if not findings:
        findings.append(
            finding(
                obs,
                CHECK_SUBNET_IPS,
                Tag.PASS,
                f"All {len(known)} HyperPod subnet(s) have at least {IPS_LOW} free IP addresses",
                section="B.1",
                evidence=trim_evidence([subnet_line(sn) for sn in known]),
            )
        )
    return findings


# --------------------------------------------------------------------------- B.2 DNS


def _dns_commands(obs: ClusterObservation, vpc_id: str, flag: str, attribute: str) -> list[SuggestedCommand]:
    region = obs.cluster.region
    return [
        read_only(
            aws_argv("ec2", "describe-vpc-attribute", region, "--vpc-id", vpc_id, "--attribute", attribute),
            f"Confirm the current value of {attribute}.",
        ),
        mutating(
            aws_argv(
                "ec2", "modify-vpc-attribute", region, "--vpc-id", vpc_id, flag, json_arg({"Value": True})
            ),
            f"Turn on {attribute} for {vpc_id}.",
            blast_radius=f"Affects name resolution for every instance and service in {vpc_id}, not only "
            "HyperPod nodes; enabling is additive. Reversible with the same command and "
            '{"Value":false}, but turning it off on a live cluster breaks EKS and Slurm naming.',
            changes_configuration=True,
            resource=vpc_id,
            preconditions=[
                f"{vpc_id} is owned by account {obs.cluster.account_id}; a VPC shared through AWS RAM can "
                "only be modified by its owner.",
                f"{attribute} is currently false.",
            ],
        ),
    ]


def check_dns(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """enableDnsSupport and enableDnsHostnames on every HyperPod VPC."""
    subnet_ids = require_subnet_ids(obs)
    subnets = obs.network.subnets.get()
    vpc_ids = list(dict.fromkeys(subnets[s].vpc_id for s in subnet_ids if s in subnets))
    if not vpc_ids:
        raise NotApplicable("the VPC of the cluster's subnets is unknown (reported by vpc.alignment)")
    vpcs = obs.network.vpcs.get()
    findings: list[Finding] = []
    for vpc_id in vpc_ids:
        vpc = vpcs.get(vpc_id)
        if vpc is None:
            findings.append(
                finding(
                    obs,
                    CHECK_DNS,
                    Tag.UNKNOWN,
                    f"Could not read the DNS attributes of {vpc_id}",
                    priority=Priority.P2,
                    section="B.2",
                    evidence=[f"{vpc_id}: not described"],
                )
            )
            continue
        attrs = (
            (
                "enableDnsSupport",
                "--enable-dns-support",
                vpc.dns_support,
                Priority.P0,
                "the Amazon-provided DNS server is off, so nodes cannot resolve AWS endpoints or each other",
            ),
            (
                "enableDnsHostnames",
                "--enable-dns-hostnames",
                vpc.dns_hostnames,
                Priority.P1,
                "instances get no private DNS hostnames, which EKS node names and Slurm host names rely on",
            ),
        )
        for attribute, flag, value, priority, effect in attrs:
            if value is None:
                findings.append(
                    finding(
                        obs,
                        CHECK_DNS,
                        Tag.UNKNOWN,
                        f"Could not read attribute {attribute} of {vpc_id}",
                        priority=Priority.P2,
                        section="B.2",
                        evidence=[f"{vpc_id} {attribute}=unknown"],
                        suggested_commands=_dns_commands(obs, vpc_id, flag, attribute)[:1],
                    )
                )
            elif value is False:
                findings.append(
                    finding(
                        obs,
                        CHECK_DNS,
                        Tag.FAIL,
                        f"{attribute} is disabled on {vpc_id}",
                        priority=priority,
                        section="B.2",
                        evidence=[f"{vpc_id} {attribute}=false"],
                        root_cause=f"With {attribute} off, {effect}.",
                        suggested_commands=_dns_commands(obs, vpc_id, flag, attribute),
                    )
                )
    if not findings:
        findings.append(
            finding(
                obs,
                CHECK_DNS,
                Tag.PASS,
                f"DNS support and DNS hostnames are enabled on {', '.join(vpc_ids)}",
                section="B.2",
                evidence=[f"{v} enableDnsSupport=true enableDnsHostnames=true" for v in vpc_ids],
            )
        )
    return findings


# --------------------------------------------------------------------------- B.3 routing


def check_routing(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """No HyperPod subnet may send its default route to an internet gateway."""
    subnet_ids = require_subnet_ids(obs)
    subnets = obs.network.subnets.get()
    tables = obs.network.route_tables.get()
    region = obs.cluster.region
    findings: list[Finding] = []
    public: dict[str, tuple[RouteTable, list[str], list[str]]] = {}
    lines: list[str] = []
    for subnet_id in subnet_ids:
        vpc_id = _vpc_for(subnet_id, subnets)
        table, implied = route_table_for(subnet_id, vpc_id, tables)
        if table is None:
            findings.append(
                finding(
                    obs,
                    CHECK_ROUTING,
                    Tag.UNKNOWN,
                    f"Could not find the route table of subnet {subnet_id} (no explicit association, and "
                    f"no main route table of {vpc_id or 'its VPC'} was described)",
                    priority=Priority.P2,
                    section="B.3",
                    evidence=[f"{subnet_id} {vpc_id or '-'}"],
                    suggested_commands=[
                        read_only(
                            aws_argv(
                                "ec2",
                                "describe-route-tables",
                                region,
                                "--filters",
                                f"Name=association.subnet-id,Values={subnet_id}",
                            ),
                            "Look up the route table explicitly associated with the subnet.",
                        )
                    ],
                )
            )
            continue
        line = route_line(subnet_id, table, implied)
        lines.append(line)
        igw = [r for r in default_routes(table) if r.target.startswith("igw-")]
        if igw:
            entry = public.setdefault(table.route_table_id, (table, [], []))
            entry[1].append(subnet_id)
            entry[2].append(line)
    for table, subnet_list, evidence in public.values():
        targets = sorted({r.target for r in default_routes(table) if r.target.startswith("igw-")})
        findings.append(
            finding(
                obs,
                CHECK_ROUTING,
                Tag.FAIL,
                f"Route table {table.route_table_id} sends the default route of HyperPod subnet(s) "
                f"{', '.join(subnet_list)} to internet gateway {', '.join(targets)}; HyperPod needs private "
                "subnets",
                priority=Priority.P0,
                section="B.3",
                evidence=evidence,
                root_cause="HyperPod nodes get no public IP addresses, so a default route to an internet "
                "gateway gives them no way out. Route 0.0.0.0/0 through a NAT gateway in a "
                "public subnet, or use a route table without a default route plus VPC endpoints.",
                suggested_commands=[
                    read_only(
                        aws_argv(
                            "ec2", "describe-route-tables", region, "--route-table-ids", table.route_table_id
                        ),
                        "Show the routes and subnet associations of the table.",
                    ),
                    read_only(
                        aws_argv(
                            "ec2",
                            "describe-nat-gateways",
                            region,
                            "--filter",
                            f"Name=vpc-id,Values={table.vpc_id}",
                            "Name=state,Values=available",
                        ),
                        "List NAT gateways that a private route table could point to.",
                    ),
                ],
            )
        )
    if not findings:
        findings.append(
            finding(
                obs,
                CHECK_ROUTING,
                Tag.PASS,
                f"No HyperPod subnet routes its default traffic to an internet gateway "
                f"({len(lines)} subnet(s))",
                section="B.3",
                evidence=trim_evidence(lines),
            )
        )
    return findings


# --------------------------------------------------------------------------- B.4 endpoints


def _egress(table: RouteTable) -> str | None:
    """How a table reaches the internet for private nodes, or None."""
    targets = [r.target for r in default_routes(table)]
    if any(t.startswith("nat-") for t in targets):
        return "NAT gateway"
    if any(t.startswith("tgw-") for t in targets):
        return "transit gateway, assumed"
    return None


def _matches(endpoint: VpcEndpoint, suffix: str) -> bool:
    return endpoint.service_name.endswith("." + suffix) and endpoint.state.lower() == "available"


def check_endpoints(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Isolated subnets (no NAT or transit gateway default route) need the AWS service endpoints."""
    subnet_ids = require_subnet_ids(obs)
    subnets = obs.network.subnets.get()
    tables = obs.network.route_tables.get()
    region = obs.cluster.region

    isolated: list[tuple[str, RouteTable]] = []
    unknown: list[str] = []
    egress_lines: list[str] = []
    for subnet_id in subnet_ids:
        table, implied = route_table_for(subnet_id, _vpc_for(subnet_id, subnets), tables)
        if table is None:
            unknown.append(subnet_id)
            continue
        how = _egress(table)
        if how is None:
            isolated.append((subnet_id, table))
        else:
            egress_lines.append(f"{route_line(subnet_id, table, implied)} (egress via {how})")

    if not isolated:
        if unknown:
            return [
                finding(
                    obs,
                    CHECK_ENDPOINTS,
                    Tag.UNKNOWN,
                    f"Could not tell whether subnet(s) {', '.join(unknown)} have internet egress "
                    "(route table unknown)",
                    priority=Priority.P2,
                    section="B.4",
                    evidence=egress_lines,
                )
            ]
        via_tgw = any("transit gateway" in line for line in egress_lines)
        via_nat = any("NAT gateway" in line for line in egress_lines)
        if via_nat:
            message = "NAT egress present; interface endpoints optional" + (
                " (some subnets egress via transit gateway, assumed)" if via_tgw else ""
            )
        else:
            message = "Egress via transit gateway, assumed; interface endpoints optional"
        return [
            finding(
                obs,
                CHECK_ENDPOINTS,
                Tag.PASS,
                message,
                section="B.4",
                evidence=trim_evidence(egress_lines),
            )
        ]

    endpoints = obs.network.endpoints.get()
    required = list(REQUIRED_ENDPOINTS)
    if obs.cluster.orchestrator == "EKS":
        required.append(EKS_ENDPOINT)
    isolated_ids = [s for s, _ in isolated]
    isolated_tables = {t.route_table_id: t for _, t in isolated}
    vpc_ids = list(dict.fromkeys(t.vpc_id for t in isolated_tables.values()))
    context = [f"{s} -> {t.route_table_id}: no NAT or transit-gateway default route" for s, t in isolated]
    if unknown:
        context.append(f"route table unknown for: {', '.join(unknown)}")
    findings: list[Finding] = []

    s3_gateways = [e for e in endpoints if _matches(e, "s3") and e.endpoint_type == "Gateway"]
    s3_interface = [
        e for e in endpoints if _matches(e, "s3") and e.endpoint_type == "Interface" and e.private_dns
    ]
    missing = [
        svc
        for svc in required
        if (
            not (s3_gateways or s3_interface) if svc == "s3" else not any(_matches(e, svc) for e in endpoints)
        )
    ]
    if missing:
        commands = [
            read_only(
                aws_argv(
                    "ec2",
                    "describe-vpc-endpoints",
                    region,
                    "--filters",
                    f"Name=vpc-id,Values={','.join(vpc_ids)}",
                ),
                "List the endpoints of the VPC and their states.",
            )
        ]
        if len(vpc_ids) == 1:
            commands.extend(_create_endpoint_commands(obs, vpc_ids[0], missing, isolated, subnets))
        findings.append(
            finding(
                obs,
                CHECK_ENDPOINTS,
                Tag.FAIL,
                f"Isolated HyperPod subnet(s) lack {len(missing)} required VPC endpoint(s): "
                f"{', '.join(missing)}",
                priority=Priority.P1,
                section="B.4",
                evidence=[*(f"missing: com.amazonaws.{region}.{svc}" for svc in missing), *context],
                root_cause="Without a NAT gateway the nodes reach AWS services only through VPC endpoints; a "
                "missing one stalls bootstrap, image pulls, SSM access or log delivery.",
                suggested_commands=commands,
            )
        )

    if s3_gateways:
        unassociated = [
            t
            for t in isolated_tables.values()
            if not any(t.route_table_id in e.route_table_ids for e in s3_gateways)
        ]
        if unassociated:
            gw = s3_gateways[0]
            rtb_ids = [t.route_table_id for t in unassociated]
            findings.append(
                finding(
                    obs,
                    CHECK_ENDPOINTS,
                    Tag.FAIL,
                    f"S3 gateway endpoint {gw.endpoint_id} is not associated with route table(s) "
                    f"{', '.join(rtb_ids)} of isolated HyperPod subnets",
                    priority=Priority.P1,
                    section="B.4",
                    evidence=[
                        f"{gw.endpoint_id} route tables: {', '.join(gw.route_table_ids) or '-'}",
                        *(f"{s} -> {t.route_table_id}" for s, t in isolated if t in unassociated),
                    ],
                    root_cause="A gateway endpoint only serves subnets whose route table it is attached to; "
                    "S3 requests (lifecycle scripts, images) from these subnets time out.",
                    suggested_commands=[
                        mutating(
                            aws_argv(
                                "ec2",
                                "modify-vpc-endpoint",
                                region,
                                "--vpc-endpoint-id",
                                gw.endpoint_id,
                                "--add-route-table-ids",
                                *rtb_ids,
                            ),
                            "Attach the S3 gateway endpoint to the isolated subnets' route tables.",
                            blast_radius=f"All S3 traffic from every subnet using {', '.join(rtb_ids)} "
                            "(not only "
                            "HyperPod nodes) goes through the endpoint and is subject to its endpoint "
                            "policy. Reversible with --remove-route-table-ids.",
                            changes_configuration=True,
                            resource=gw.endpoint_id,
                            preconditions=[f"{gw.endpoint_id} is in the same VPC as the route tables."],
                        )
                    ],
                )
            )

    private_dns_off = [
        e
        for e in endpoints
        if e.endpoint_type == "Interface"
        and e.private_dns is False
        and any(_matches(e, svc) for svc in required if svc != "s3")
    ]
    if private_dns_off:
        findings.append(
            finding(
                obs,
                CHECK_ENDPOINTS,
                Tag.WARN,
                f"Interface endpoint(s) {', '.join(e.endpoint_id for e in private_dns_off)} have private DNS "
                "disabled; default SDK endpoints will not resolve to them",
                priority=Priority.P2,
                section="B.4",
                evidence=[f"{e.endpoint_id} {e.service_name} private_dns=false" for e in private_dns_off],
                root_cause="Without private DNS the public service name keeps resolving to public addresses, "
                "which isolated nodes cannot reach.",
            )
        )

    for svc in OPTIONAL_ENDPOINTS:
        if not any(_matches(e, svc) for e in endpoints):
            findings.append(
                finding(
                    obs,
                    CHECK_ENDPOINTS,
                    Tag.INFO,
                    f"No {svc} endpoint; needed only if the isolated nodes call the FSx API",
                    section="B.4",
                    evidence=[f"absent: com.amazonaws.{region}.{svc}"],
                )
            )

    if not any(f.is_problem for f in findings):
        present = [
            f"present: {e.endpoint_id} {e.service_name} ({e.endpoint_type})"
            for e in endpoints
            if any(_matches(e, svc) for svc in required)
        ]
        findings.insert(
            0,
            finding(
                obs,
                CHECK_ENDPOINTS,
                Tag.PASS,
                f"All {len(required)} required VPC endpoints serve the isolated subnet(s) "
                f"{', '.join(isolated_ids)}",
                section="B.4",
                evidence=trim_evidence([*context, *present], 30),
            ),
        )
    return findings


def _create_endpoint_commands(
    obs: ClusterObservation,
    vpc_id: str,
    missing: list[str],
    isolated: list[tuple[str, RouteTable]],
    subnets: dict[str, Subnet],
) -> list[SuggestedCommand]:
    region = obs.cluster.region
    commands: list[SuggestedCommand] = []
    # an interface endpoint takes at most one subnet per Availability Zone
    per_az: dict[str, str] = {}
    for subnet_id, _ in isolated:
        az = subnets[subnet_id].availability_zone if subnet_id in subnets else subnet_id
        per_az.setdefault(az, subnet_id)
    rtb_ids = list(dict.fromkeys(t.route_table_id for _, t in isolated))
    for svc in missing:
        service_name = f"com.amazonaws.{region}.{svc}"
        if svc == "s3":
            argv = aws_argv(
                "ec2",
                "create-vpc-endpoint",
                region,
                "--vpc-id",
                vpc_id,
                "--vpc-endpoint-type",
                "Gateway",
                "--service-name",
                service_name,
                "--route-table-ids",
                *rtb_ids,
            )
            radius = (
                f"All S3 traffic from every subnet using {', '.join(rtb_ids)} goes through the new "
                "gateway endpoint (no charge). Reversible with delete-vpc-endpoints."
            )
            pre = [f"{vpc_id} has no S3 gateway endpoint yet (only one per route table is allowed)."]
        else:
            argv = aws_argv(
                "ec2",
                "create-vpc-endpoint",
                region,
                "--vpc-id",
                vpc_id,
                "--vpc-endpoint-type",
                "Interface",
                "--service-name",
                service_name,
                "--subnet-ids",
                *per_az.values(),
                "--private-dns-enabled",
            )
            radius = (
                f"With private DNS, every resource in {vpc_id} resolves {svc} to the new endpoint "
                "instead of the public one; adds hourly and per-GB charges. Reversible with "
                "delete-vpc-endpoints."
            )
            pre = [
                "Without --security-group-ids the VPC's default security group is used; it must allow "
                "inbound TCP 443 from the HyperPod subnets (add --security-group-ids otherwise).",
                "enableDnsSupport and enableDnsHostnames are on for the VPC (needed for private DNS).",
            ]
        commands.append(
            mutating(
                argv,
                f"Create the {svc} endpoint for the isolated HyperPod subnets.",
                blast_radius=radius,
                changes_configuration=True,
                resource=vpc_id,
                preconditions=pre,
            )
        )
    return commands


# --------------------------------------------------------------------------- B.1 ENI quota


def check_eni_quota(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Network interfaces in use against the regional quota."""
    count = obs.network.eni_count.get()
    quota = obs.network.eni_quota.get()
    region = obs.cluster.region
    if quota is None or quota <= 0:
        return [
            finding(
                obs,
                CHECK_ENI_QUOTA,
                Tag.UNKNOWN,
                f"Service Quotas returned no usable value for {ENI_QUOTA_CODE} "
                "(Network interfaces per Region)",
                priority=Priority.P2,
                section="B.1",
                evidence=[f"eni_count={count} quota={quota}"],
            )
        ]
    ratio = count / quota
    evidence = [
        f"network interfaces in use: {count}",
        f"quota {ENI_QUOTA_CODE} (Network interfaces per Region, {region}): {quota:g}",
        f"usage: {ratio:.0%}",
    ]
    check_quota = read_only(
        aws_argv(
            "service-quotas",
            "get-service-quota",
            region,
            "--service-code",
            "ec2",
            "--quota-code",
            ENI_QUOTA_CODE,
        ),
        "Read the current regional network-interface quota.",
    )
    if ratio < ENI_WARN_RATIO:
        return [
            finding(
                obs,
                CHECK_ENI_QUOTA,
                Tag.PASS,
                f"{count} of {quota:g} network interfaces in use ({ratio:.0%} of the regional quota)",
                section="B.1",
                evidence=evidence,
            )
        ]
    critical = ratio >= ENI_FAIL_RATIO
    desired = math.ceil(max(quota, count) * 1.5)
    return [
        finding(
            obs,
            CHECK_ENI_QUOTA,
            Tag.FAIL if critical else Tag.WARN,
            f"{count} of {quota:g} network interfaces in use ({ratio:.0%} of the regional quota)"
            + ("; new nodes may fail to launch" if critical else ""),
            priority=Priority.P1 if critical else Priority.P2,
            section="B.1",
            evidence=evidence,
            root_cause="Each node needs several network interfaces (more on EFA instance types); when the "
            "regional quota is reached, launches and replacements fail.",
            suggested_commands=[
                check_quota,
                mutating(
                    aws_argv(
                        "service-quotas",
                        "request-service-quota-increase",
                        region,
                        "--service-code",
                        "ec2",
                        "--quota-code",
                        ENI_QUOTA_CODE,
                        "--desired-value",
                        str(desired),
                    ),
                    "Ask AWS to raise the regional network-interface quota.",
                    blast_radius=f"Raises a limit for the whole account in {region}; no resource changes. "
                    "A granted increase cannot be withdrawn by request.",
                    changes_configuration=False,
                    step="change",
                    iac_note="No infrastructure-as-code drift: a quota request changes an account limit, "
                    "not a resource a template manages.",
                    preconditions=[f"Adjust --desired-value ({desired}) to the growth you plan."],
                ),
            ],
        )
    ]


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
