"""``hyperpod-debugger mcp`` as an MCP client launches it: a subprocess speaking JSON-RPC on stdio, reached by
the SDK's stdio client; and ``make mcp-demo``'s agent-style session, as a user runs it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from datetime import UTC, datetime

import anyio
import pytest
from mcp import Client, StdioServerParameters

from hyperpod_debugger.aws.clients import AwsClients
from hyperpod_sim import agent_demo, scenarios
from hyperpod_sim.server import simulated_aws
from tests.cli_server import mcp_over_http

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(sys.executable).with_name("hyperpod-debugger")


@pytest.fixture
def account():
    with simulated_aws() as endpoint:
        clients = AwsClients(scenarios.REGION, max_attempts=2)
        demo = scenarios.seed_demo(clients, datetime.now(UTC))
        yield endpoint, agent_demo.seed_node_history(clients, demo, datetime.now(UTC))


def test_the_cli_serves_the_tools_over_stdio(account):
    endpoint, scene = account
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERPOD_DEBUGGER_")}
    env.update({"AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": scenarios.REGION})
    params = StdioServerParameters(command=str(CLI), args=["mcp", "--table", scene.table], env=env)

    async def talk() -> tuple:
        async with Client(params) as client:
            tools = await client.list_tools()
            section = await client.call_tool("read_runbook_section", {"section": "I.2"})
            case = await client.call_tool("draft_support_case", {"cluster": scene.cluster.name, "node": scene.node})
            wrong = await client.call_tool("triage_cluster", {"cluster": "ml-eks-prod", "node": "bogus"})
            return tools, section, case, wrong

    tools, section, case, wrong = anyio.run(talk)
    assert len(tools.tools) == 10 and all(t.annotations.read_only_hint for t in tools.tools)
    assert section.structured_content["text"].startswith("### I.2 Root volume space")
    assert not case.is_error, case.content
    assert "2 reboot(s) and 0 replacement(s)" in case.structured_content["markdown"]
    assert wrong.is_error and "invalid_argument: " in wrong.content[0].text


def test_mcp_demo_shows_an_agent_session():
    result = subprocess.run(
        [sys.executable, "-m", "hyperpod_sim.agent_demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Traceback" not in result.stderr
    assert "── the agent lists the tools" in out and "draft_support_case       read-only" in out
    assert "WRITES" not in out
    assert "triage_cluster(cluster='ml-eks-prod'" in out
    assert "Suggested command (run this yourself)" in out and "never run" in out
    assert "2 reboot(s) and 0 replacement(s)" in out
    assert "cluster_not_found: " in out
    assert "Found credentials" not in out + result.stderr  # the SDK's own INFO lines stay out


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_cli_serves_streamable_http_on_loopback():
    port = _free_port()
    with mcp_over_http("127.0.0.1", port):

        async def talk() -> tuple:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                tools = await client.list_tools()
                page = await client.call_tool("read_runbook_section", {"section": "K"})
                return tools, page

        tools, page = anyio.run(talk)
        assert {t.name for t in tools.tools} >= {"triage_cluster", "draft_support_case"}
        assert page.structured_content["text"].startswith("## K Node access through SSM")
