"""§ B.4: VPC endpoints for isolated subnets."""

from __future__ import annotations

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.checks.vpc.common import (
    CHECK_ENDPOINTS,
    EKS_ENDPOINT,
    OPTIONAL_ENDPOINTS,
    REQUIRED_ENDPOINTS,
    _vpc_for,
    default_routes,
    require_subnet_ids,
    route_line,
    route_table_for,
)
from hyperpod_debugger.domain.commands import aws_argv, mutating, read_only
from hyperpod_debugger.domain.model import Finding, Priority, SuggestedCommand, Tag, trim_evidence
from hyperpod_debugger.domain.observations import (
    ClusterObservation,
    RouteTable,
    Subnet,
    VpcEndpoint,
)


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


#: Isolated subnets, each with the route table it uses.
_Isolated = list[tuple[str, RouteTable]]


def check_endpoints(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """Isolated subnets (no NAT or transit gateway default route) need the AWS service endpoints."""
    subnet_ids = require_subnet_ids(obs)
    subnets = obs.network.subnets.get()
    isolated, unknown, egress_lines = _egress_of(subnet_ids, subnets, obs.network.route_tables.get())
    if not isolated:
        return [_egress_verdict(obs, unknown, egress_lines)]

    endpoints = obs.network.endpoints.get()
    required = [*REQUIRED_ENDPOINTS, *([EKS_ENDPOINT] if obs.cluster.orchestrator == "EKS" else [])]
    context = [f"{s} -> {t.route_table_id}: no NAT or transit-gateway default route" for s, t in isolated]
    if unknown:
        context.append(f"route table unknown for: {', '.join(unknown)}")
    findings: list[Finding] = []
    missing = [svc for svc in required if not _served(svc, endpoints)]
    if missing:
        findings.append(_missing_endpoints(obs, missing, isolated, subnets, context))
    s3_gateways = [e for e in endpoints if _matches(e, "s3") and e.endpoint_type == "Gateway"]
    unassociated = _tables_without(s3_gateways, isolated) if s3_gateways else []
    if unassociated:
        findings.append(_s3_gateway_unassociated(obs, s3_gateways[0], isolated, unassociated))
    private_dns_off = [
        e
        for e in endpoints
        if e.endpoint_type == "Interface"
        and e.private_dns is False
        and any(_matches(e, svc) for svc in required if svc != "s3")
    ]
    if private_dns_off:
        findings.append(_private_dns_disabled(obs, private_dns_off))
    findings += [_optional_absent(obs, svc) for svc in OPTIONAL_ENDPOINTS if not _served(svc, endpoints)]
    if not any(f.is_problem for f in findings):
        findings.insert(0, _all_required_present(obs, required, endpoints, isolated, context))
    return findings


def _egress_of(
    subnet_ids: list[str], subnets: dict[str, Subnet], tables: list[RouteTable]
) -> tuple[_Isolated, list[str], list[str]]:
    """The isolated subnets, the subnets whose route table is unknown, and how the others egress."""
    isolated: _Isolated = []
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
    return isolated, unknown, egress_lines


def _egress_verdict(obs: ClusterObservation, unknown: list[str], egress_lines: list[str]) -> Finding:
    """No subnet is isolated: endpoints are optional, unless a subnet's route table is unknown."""
    if unknown:
        return finding(
            obs,
            CHECK_ENDPOINTS,
            Tag.UNKNOWN,
            f"Could not tell whether subnet(s) {', '.join(unknown)} have internet egress (route table unknown)",
            priority=Priority.P2,
            section="B.4",
            evidence=egress_lines,
        )
    via_tgw = any("transit gateway" in line for line in egress_lines)
    via_nat = any("NAT gateway" in line for line in egress_lines)
    if via_nat:
        message = "NAT egress present; interface endpoints optional" + (
            " (some subnets egress via transit gateway, assumed)" if via_tgw else ""
        )
    else:
        message = "Egress via transit gateway, assumed; interface endpoints optional"
    return finding(
        obs,
        CHECK_ENDPOINTS,
        Tag.PASS,
        message,
        section="B.4",
        evidence=trim_evidence(egress_lines),
    )


def _served(svc: str, endpoints: list[VpcEndpoint]) -> bool:
    """Whether an available endpoint serves the service: S3 through a gateway endpoint or an interface
    endpoint with private DNS, any other service through its endpoint."""
    if svc == "s3":
        return any(
            _matches(e, "s3")
            and (e.endpoint_type == "Gateway" or (e.endpoint_type == "Interface" and bool(e.private_dns)))
            for e in endpoints
        )
    return any(_matches(e, svc) for e in endpoints)


def _tables_without(s3_gateways: list[VpcEndpoint], isolated: _Isolated) -> list[RouteTable]:
    """The isolated subnets' route tables no S3 gateway endpoint is attached to, each once."""
    tables = {t.route_table_id: t for _, t in isolated}
    return [t for t in tables.values() if not any(t.route_table_id in e.route_table_ids for e in s3_gateways)]


def _missing_endpoints(
    obs: ClusterObservation,
    missing: list[str],
    isolated: _Isolated,
    subnets: dict[str, Subnet],
    context: list[str],
) -> Finding:
    region = obs.cluster.region
    vpc_ids = list(dict.fromkeys(t.vpc_id for _, t in isolated))
    commands = [
        read_only(
            aws_argv("ec2", "describe-vpc-endpoints", region, "--filters", f"Name=vpc-id,Values={','.join(vpc_ids)}"),
            "List the endpoints of the VPC and their states.",
        )
    ]
    if len(vpc_ids) == 1:
        commands.extend(_create_endpoint_commands(obs, vpc_ids[0], missing, isolated, subnets))
    return finding(
        obs,
        CHECK_ENDPOINTS,
        Tag.FAIL,
        f"Isolated HyperPod subnet(s) lack {len(missing)} required VPC endpoint(s): {', '.join(missing)}",
        priority=Priority.P1,
        section="B.4",
        evidence=[*(f"missing: com.amazonaws.{region}.{svc}" for svc in missing), *context],
        root_cause="Without a NAT gateway the nodes reach AWS services only through VPC endpoints; a "
        "missing one stalls bootstrap, image pulls, SSM access or log delivery.",
        suggested_commands=commands,
    )


def _s3_gateway_unassociated(
    obs: ClusterObservation, gw: VpcEndpoint, isolated: _Isolated, unassociated: list[RouteTable]
) -> Finding:
    rtb_ids = [t.route_table_id for t in unassociated]
    return finding(
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
                    obs.cluster.region,
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


def _private_dns_disabled(obs: ClusterObservation, endpoints: list[VpcEndpoint]) -> Finding:
    return finding(
        obs,
        CHECK_ENDPOINTS,
        Tag.WARN,
        f"Interface endpoint(s) {', '.join(e.endpoint_id for e in endpoints)} have private DNS "
        "disabled; default SDK endpoints will not resolve to them",
        priority=Priority.P2,
        section="B.4",
        evidence=[f"{e.endpoint_id} {e.service_name} private_dns=false" for e in endpoints],
        root_cause="Without private DNS the public service name keeps resolving to public addresses, "
        "which isolated nodes cannot reach.",
    )


def _optional_absent(obs: ClusterObservation, svc: str) -> Finding:
    return finding(
        obs,
        CHECK_ENDPOINTS,
        Tag.INFO,
        f"No {svc} endpoint; needed only if the isolated nodes call the FSx API",
        section="B.4",
        evidence=[f"absent: com.amazonaws.{obs.cluster.region}.{svc}"],
    )


def _all_required_present(
    obs: ClusterObservation, required: list[str], endpoints: list[VpcEndpoint], isolated: _Isolated, context: list[str]
) -> Finding:
    present = [
        f"present: {e.endpoint_id} {e.service_name} ({e.endpoint_type})"
        for e in endpoints
        if any(_matches(e, svc) for svc in required)
    ]
    return finding(
        obs,
        CHECK_ENDPOINTS,
        Tag.PASS,
        f"All {len(required)} required VPC endpoints serve the isolated subnet(s) {', '.join(s for s, _ in isolated)}",
        section="B.4",
        evidence=trim_evidence([*context, *present], 30),
    )


def _create_endpoint_commands(
    obs: ClusterObservation,
    vpc_id: str,
    missing: list[str],
    isolated: _Isolated,
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
