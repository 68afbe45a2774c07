"""§ B.3: private subnets, no default route to an internet gateway."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperpod_debugger.checks.base import CheckContext, finding
from hyperpod_debugger.checks.vpc.common import (
    CHECK_ROUTING,
    _vpc_for,
    default_routes,
    require_subnet_ids,
    route_line,
    route_table_for,
)
from hyperpod_debugger.domain.commands import aws_argv, read_only
from hyperpod_debugger.domain.model import Finding, Priority, Tag, trim_evidence

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import (
        ClusterObservation,
        RouteTable,
    )


def check_routing(obs: ClusterObservation, ctx: CheckContext) -> list[Finding]:
    """No HyperPod subnet may send its default route to an internet gateway."""
    subnet_ids = require_subnet_ids(obs)
    subnets = obs.network.subnets.get()
    tables = obs.network.route_tables.get()
    findings: list[Finding] = []
    #: route table id -> the table, the HyperPod subnets it sends to an internet gateway, their route lines
    public: dict[str, tuple[RouteTable, list[str], list[str]]] = {}
    lines: list[str] = []
    for subnet_id in subnet_ids:
        vpc_id = _vpc_for(subnet_id, subnets)
        table, implied = route_table_for(subnet_id, vpc_id, tables)
        if table is None:
            findings.append(_route_table_unknown(obs, subnet_id, vpc_id))
            continue
        line = route_line(subnet_id, table, implied)
        lines.append(line)
        if _igw_targets(table):
            entry = public.setdefault(table.route_table_id, (table, [], []))
            entry[1].append(subnet_id)
            entry[2].append(line)
    findings += [_routes_to_igw(obs, table, subnet_list, evidence) for table, subnet_list, evidence in public.values()]
    if not findings:
        findings.append(
            finding(
                obs,
                CHECK_ROUTING,
                Tag.PASS,
                f"No HyperPod subnet routes its default traffic to an internet gateway ({len(lines)} subnet(s))",
                section="B.3",
                evidence=trim_evidence(lines),
            )
        )
    return findings


def _igw_targets(table: RouteTable) -> list[str]:
    """The internet gateways the table's active default routes go to."""
    return sorted({r.target for r in default_routes(table) if r.target.startswith("igw-")})


def _route_table_unknown(obs: ClusterObservation, subnet_id: str, vpc_id: str | None) -> Finding:
    return finding(
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
                    obs.cluster.region,
                    "--filters",
                    f"Name=association.subnet-id,Values={subnet_id}",
                ),
                "Look up the route table explicitly associated with the subnet.",
            )
        ],
    )


def _routes_to_igw(obs: ClusterObservation, table: RouteTable, subnet_ids: list[str], evidence: list[str]) -> Finding:
    region = obs.cluster.region
    return finding(
        obs,
        CHECK_ROUTING,
        Tag.FAIL,
        f"Route table {table.route_table_id} sends the default route of HyperPod subnet(s) "
        f"{', '.join(subnet_ids)} to internet gateway {', '.join(_igw_targets(table))}; HyperPod needs private "
        "subnets",
        priority=Priority.P0,
        section="B.3",
        evidence=evidence,
        root_cause="HyperPod nodes get no public IP addresses, so a default route to an internet "
        "gateway gives them no way out. Route 0.0.0.0/0 through a NAT gateway in a "
        "public subnet, or use a route table without a default route plus VPC endpoints.",
        suggested_commands=[
            read_only(
                aws_argv("ec2", "describe-route-tables", region, "--route-table-ids", table.route_table_id),
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
