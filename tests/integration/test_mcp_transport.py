"""``hyperpod-debugger mcp --transport streamable-http``: who may talk to the server, for each kind of bind.

The SDK's streamable HTTP app, behind our checks, is driven in-process (Starlette's test client runs its
lifespan, so sessions work as they do under uvicorn): for each bind a foreign Host, a foreign Origin and a
DNS-rebinding pair are refused before any tool runs, a correct session lists and calls tools, and beyond
loopback nothing is served without the bearer token. The CLI's side (the opt-in, the warning, where the token
comes from) runs ``main`` in-process with the server's loop replaced; one test starts the real CLI on a
socket.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import httpx2
import pytest
from starlette.testclient import TestClient

from hyperpod_debugger.agent import server as mcp_server
from hyperpod_debugger.agent import tools
from hyperpod_debugger.agent.server import AccessError, HttpAccess, build_server, http_access, http_app, is_loopback
from hyperpod_debugger.cli.main import main
from tests.cli_server import mcp_over_http

PORT = 8765
TOKEN = "0123456789abcdef" * 4
PROTOCOL = "2025-06-18"
EVIL_HOST = f"evil.example:{PORT}"
EVIL_ORIGIN = f"http://evil.example:{PORT}"

#: (bind, whether it needs --allow-remote, and so a token)
BINDS = [
    pytest.param(("127.0.0.1", False), id="127.0.0.1"),
    pytest.param(("localhost", False), id="localhost"),
    pytest.param(("::1", False), id="::1"),
    pytest.param(("127.0.0.2", True), id="127.0.0.2-opt-in"),
    pytest.param(("0.0.0.0", True), id="0.0.0.0-opt-in"),  # noqa: S104 - the bind under test
]
REMOTE_BINDS = [b for b in BINDS if cast(tuple[str, bool], b.values[0])[1]]


def _no_aws(region: str) -> Any:
    raise AssertionError(f"a local tool reached for AWS ({region})")


@dataclass
class Door:
    """One server behind its checks, a client addressing it by its own name, and the tool calls it ran."""

    client: TestClient
    access: HttpAccess
    token: str | None
    calls: list[str] = field(default_factory=list)

    @property
    def authority(self) -> str:
        return self.access.allowed_hosts[0]

    def post(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None, **headers: str
    ) -> httpx2.Response:
        """One JSON-RPC message; ``headers`` replace ours (``authorization=""`` sends none)."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if not method.startswith("notifications/"):
            body["id"] = 1
        if params is not None:
            body["params"] = params
        sent = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if self.token is not None:
            sent["authorization"] = f"Bearer {self.token}"
        if session is not None:
            sent.update({"mcp-session-id": session, "mcp-protocol-version": PROTOCOL})
        sent.update({name.replace("_", "-"): value for name, value in headers.items()})
        if sent.get("authorization") == "":
            del sent["authorization"]
        return self.client.post("/mcp", content=json.dumps(body), headers=sent)

    def open_session(self) -> str:
        hello = {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}
        response = self.post("initialize", hello)
        assert response.status_code == 200, response.text
        session = response.headers["mcp-session-id"]
        assert self.post("notifications/initialized", session=session).status_code == 202
        return session

    def call_runbook(self, session: str, **headers: str) -> httpx2.Response:
        return self.post(
            "tools/call", {"name": "read_runbook_section", "arguments": {"section": "K"}}, session=session, **headers
        )


def answer(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a response, sent as JSON or as one server-sent event."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return dict(response.json())
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    return dict(json.loads(data[-1]))


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sections read_runbook_section was asked for: a refused request must leave it empty."""
    calls: list[str] = []
    original = tools.read_runbook_section

    def recorded(section: str) -> tools.RunbookSection:
        calls.append(section)
        return original(section)

    monkeypatch.setattr(tools, "read_runbook_section", recorded)
    return calls


@contextmanager
def open_door(access: HttpAccess, calls: list[str]) -> Iterator[Door]:
    app = http_app(build_server(clients_for=_no_aws), access)
    with TestClient(app, base_url=f"http://{access.allowed_hosts[0]}") as client:
        yield Door(client, access, access.token, calls)


@pytest.fixture(params=BINDS)
def door(request: pytest.FixtureRequest, spy: list[str]) -> Iterator[Door]:
    bind, remote = request.param
    with open_door(http_access(bind, PORT, token=TOKEN if remote else None), spy) as opened:
        yield opened


@pytest.fixture(params=REMOTE_BINDS)
def remote_door(request: pytest.FixtureRequest, spy: list[str]) -> Iterator[Door]:
    bind, _ = request.param
    with open_door(http_access(bind, PORT, token=TOKEN), spy) as opened:
        yield opened


# --------------------------------------------------------------------------- every bind


def test_a_correct_session_lists_and_calls_the_tools(door):
    session = door.open_session()
    listed = answer(door.post("tools/list", session=session))
    assert {"triage_cluster", "read_runbook_section"} <= {t["name"] for t in listed["result"]["tools"]}
    page = answer(door.call_runbook(session))["result"]
    assert not page.get("isError"), page
    assert page["structuredContent"]["text"].startswith("## K Node access through SSM")
    assert door.calls == ["K"]


def test_a_foreign_host_is_refused(door):
    session = door.open_session()
    name, _, _ = door.authority.rpartition(":")
    for host in (EVIL_HOST, f"{name}:{PORT + 1}", name, f"{door.authority}.evil.example"):
        refused = door.call_runbook(session, host=host)
        assert refused.status_code == 421, host
    assert door.post("initialize", {}, host=EVIL_HOST).status_code == 421
    assert door.calls == []


def test_a_foreign_origin_is_refused(door):
    session = door.open_session()
    for origin in (EVIL_ORIGIN, "null", f"http://{door.authority}.evil.example", f"ftp://{door.authority}"):
        refused = door.call_runbook(session, origin=origin)
        assert refused.status_code == 403, origin
    assert door.calls == []


def test_a_dns_rebinding_pair_is_refused(door):
    session = door.open_session()
    refused = door.call_runbook(session, host=EVIL_HOST, origin=EVIL_ORIGIN)
    assert refused.status_code == 421
    assert door.post("initialize", {}, host=EVIL_HOST, origin=EVIL_ORIGIN).status_code == 421
    assert door.calls == []


def test_a_page_served_by_the_server_itself_may_call(door):
    session = door.open_session()
    for scheme in ("http", "https"):
        page = answer(door.call_runbook(session, origin=f"{scheme}://{door.authority}"))
        assert not page["result"].get("isError")
    assert door.calls == ["K", "K"]


# --------------------------------------------------------------------------- the bearer token


def test_beyond_loopback_nothing_is_served_without_the_token(remote_door):
    for authorization in ("", "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"):
        refused = remote_door.post("initialize", {}, authorization=authorization)
        assert refused.status_code == 401, authorization
        assert refused.headers["www-authenticate"] == "Bearer"
    session = remote_door.open_session()  # with the token
    refused = remote_door.call_runbook(session, authorization="")
    assert refused.status_code == 401
    assert remote_door.calls == []
    assert answer(remote_door.call_runbook(session))["result"]["structuredContent"]["section"] == "K"
    assert remote_door.calls == ["K"]


def test_a_loopback_bind_may_require_a_token_too(spy):
    with open_door(http_access("127.0.0.1", PORT, token=TOKEN), spy) as door:
        assert door.post("initialize", {}, authorization="").status_code == 401
        door.call_runbook(door.open_session())
    assert spy == ["K"]


def test_the_host_is_checked_before_the_token(remote_door):
    refused = remote_door.post("initialize", {}, host=EVIL_HOST, authorization="")
    assert refused.status_code == 421


def test_the_operators_own_host_and_origin_are_accepted(spy):
    access = http_access(
        "0.0.0.0",  # noqa: S104 - the bind under test
        PORT,
        extra_hosts=["MCP.example.internal"],
        extra_origins=["https://ui.example.internal/"],
        token=TOKEN,
    )
    with open_door(access, spy) as door:
        session = door.open_session()
        ok = door.call_runbook(session, host=f"mcp.example.internal:{PORT}", origin="https://ui.example.internal")
        assert not answer(ok)["result"].get("isError")
        assert door.call_runbook(session, origin="https://ui.example.internal:8443").status_code == 403
        assert door.call_runbook(session, host="mcp.example.internal:9999").status_code == 421
    assert spy == ["K"]


def test_the_sdks_own_check_is_given_the_same_lists(spy):
    """The second layer: the SDK's app alone, with our settings, refuses a foreign Host on a 0.0.0.0 bind too
    (left to itself, the SDK checks only its three loopback spellings)."""
    access = http_access("0.0.0.0", PORT)  # noqa: S104 - the bind under test
    security = access.transport_security()
    assert security.enable_dns_rebinding_protection
    assert security.allowed_hosts == [f"0.0.0.0:{PORT}"]
    assert not any(value.endswith(":*") for value in security.allowed_hosts + security.allowed_origins)
    app = build_server(clients_for=_no_aws).streamable_http_app(transport_security=security, host=access.host)
    with TestClient(app, base_url=f"http://0.0.0.0:{PORT}") as client:
        door = Door(client, access, None, spy)
        assert door.post("initialize", {}, host=EVIL_HOST).status_code == 421
        assert door.post("initialize", {}, origin=EVIL_ORIGIN).status_code == 403


# --------------------------------------------------------------------------- what counts as loopback


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("LocalHost", True),
        ("::1", True),
        ("[::1]", True),
        ("0:0:0:0:0:0:0:1", True),
        ("127.0.0.2", False),  # loopback to the kernel, but not one of the three: the opt-in is asked for
        ("127.1", False),
        ("::ffff:127.0.0.1", False),
        ("0.0.0.0", False),  # noqa: S104
        ("::", False),
        ("10.0.0.5", False),
        ("localhost.example.com", False),
        ("", False),
    ],
)
def test_what_counts_as_loopback(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("bind", "hosts"),
    [
        ("127.0.0.1", (f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}")),
        ("localhost", (f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}")),
        ("[::1]", (f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}")),
        ("127.0.0.2", (f"127.0.0.2:{PORT}",)),
        ("0.0.0.0", (f"0.0.0.0:{PORT}",)),  # noqa: S104
        ("::", (f"[::]:{PORT}",)),
        ("10.0.0.5", (f"10.0.0.5:{PORT}",)),
        ("Box.Example.Internal", (f"box.example.internal:{PORT}",)),
    ],
)
def test_the_hosts_each_bind_accepts(bind, hosts):
    access = http_access(bind, PORT)
    assert access.allowed_hosts == hosts
    assert access.allowed_origins == tuple(f"{scheme}://{h}" for h in hosts for scheme in ("http", "https"))


def test_on_port_80_a_host_without_its_port_is_accepted():
    access = http_access("127.0.0.2", 80)
    assert access.allowed_hosts == ("127.0.0.2:80", "127.0.0.2")
    assert access.allowed_origins == ("http://127.0.0.2", "https://127.0.0.2:80")


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("mcp.example.internal", f"mcp.example.internal:{PORT}"),
        ("MCP.Example.Internal:9000", "mcp.example.internal:9000"),
        ("10.0.0.5", f"10.0.0.5:{PORT}"),
        ("fe80::1", f"[fe80::1]:{PORT}"),
        ("[FE80:0:0::1]:9000", "[fe80::1]:9000"),
    ],
)
def test_an_allowed_host_is_kept_as_a_client_writes_it(value, kept):
    assert http_access("0.0.0.0", PORT, extra_hosts=[value]).allowed_hosts[-1] == kept  # noqa: S104


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("https://ui.example.internal", "https://ui.example.internal"),
        ("HTTPS://UI.example.internal:443/", "https://ui.example.internal"),
        ("http://10.0.0.5:8080", "http://10.0.0.5:8080"),
        ("http://[::1]:3000", "http://[::1]:3000"),
    ],
)
def test_an_allowed_origin_is_kept_as_a_browser_writes_it(value, kept):
    assert http_access("127.0.0.1", PORT, extra_origins=[value]).allowed_origins[-1] == kept


@pytest.mark.parametrize("value", ["*", "*.example.internal", "http://box", "box/mcp", "box:*", "box:0", "a b", ""])
def test_an_unusable_allowed_host_is_refused(value):
    with pytest.raises(AccessError):
        http_access("127.0.0.1", PORT, extra_hosts=[value])


@pytest.mark.parametrize("value", ["*", "null", "ui.example.internal", "ftp://ui", "https://ui/path", "https://*.ui"])
def test_an_unusable_allowed_origin_is_refused(value):
    with pytest.raises(AccessError):
        http_access("127.0.0.1", PORT, extra_origins=[value])


@pytest.mark.parametrize("token", ["short", "a" * 31, "a" * 20 + " " + "b" * 20, "é" * 40])
def test_a_weak_token_is_refused_without_being_quoted(token):
    with pytest.raises(AccessError) as refused:
        http_access("127.0.0.2", PORT, token=token)
    assert token not in str(refused.value)


# --------------------------------------------------------------------------- the CLI


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[HttpAccess]:
    """What the CLI would serve, instead of serving it."""
    accesses: list[HttpAccess] = []
    monkeypatch.setattr(mcp_server, "serve_http", lambda server, access: accesses.append(access))
    return accesses


def http(*flags: str) -> list[str]:
    return ["mcp", "--transport", "streamable-http", "--port", str(PORT), *flags]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "127.0.0.2", "192.168.1.10", "box.example.internal"])  # noqa: S104
def test_a_host_beyond_loopback_needs_the_opt_in(host, served, capsys):
    assert main(http("--host", host)) == 2
    err = capsys.readouterr().err
    assert f"hyperpod-debugger mcp: error: --host {host} is not a loopback address" in err
    assert "--allow-remote" in err and "AWS credentials" in err
    assert served == []


def test_with_the_opt_in_the_risk_is_printed_and_the_token_is_not(served, capsys, monkeypatch):
    secret = "s3cr3t-" + "x" * 40
    monkeypatch.setenv("MCP_TOKEN", secret)
    assert main(http("--host", "0.0.0.0", "--allow-remote", "--auth-token-env", "MCP_TOKEN")) == 0  # noqa: S104
    out, err = capsys.readouterr()
    assert secret not in out + err
    assert "warning:" in err and "AWS credentials" in err and "Session Manager" in err and "plain HTTP" in err
    assert "--allowed-host" in err  # a 0.0.0.0 bind without one is reachable by no client elsewhere
    [access] = served
    assert (access.host, access.port, access.token, access.loopback) == ("0.0.0.0", PORT, secret, False)  # noqa: S104


def test_without_a_token_one_is_generated_and_shown_once(served, capsys):
    assert main(http("--host", "127.0.0.2", "--allow-remote", "--allowed-host", "box.example.internal")) == 0
    err = capsys.readouterr().err
    [access] = served
    assert access.token is not None and len(access.token) >= 32
    assert err.count(access.token) == 1
    assert f"box.example.internal:{PORT}" in access.allowed_hosts and "warning:" in err


def test_a_loopback_bind_needs_no_opt_in(served, capsys):
    assert main(http()) == 0
    [access] = served
    assert (access.host, access.token, access.loopback) == ("127.0.0.1", None, True)
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--host", "127.0.0.2", "--allow-remote", "--auth-token-env", "NO_SUCH_VARIABLE"), "is not set"),
        (("--host", "127.0.0.2", "--allow-remote", "--auth-token-env", "WEAK_TOKEN"), "at least 32"),
        (("--auth-token-env", "WEAK_TOKEN"), "at least 32"),
        (("--host", "0.0.0.0", "--allow-remote", "--allowed-host", "*"), "--allowed-host"),  # noqa: S104
        (("--allowed-origin", "*"), "--allowed-origin"),
    ],
)
def test_unusable_http_options_exit_2(flags, says, served, capsys, monkeypatch):
    monkeypatch.delenv("NO_SUCH_VARIABLE", raising=False)
    monkeypatch.setenv("WEAK_TOKEN", "hunter2")
    assert main(http(*flags)) == 2
    err = capsys.readouterr().err
    assert says in err and "hunter2" not in err
    assert served == []


def test_the_http_options_are_refused_over_stdio(served, capsys):
    assert main(["mcp", "--allow-remote", "--allowed-host", "box"]) == 2
    assert "--allow-remote, --allowed-host: for --transport streamable-http only" in capsys.readouterr().err


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        try:
            probe.bind((host, 0))
        except OSError:
            pytest.skip(f"{host} cannot be bound here")
        return int(probe.getsockname()[1])


def test_the_cli_serves_a_non_loopback_bind_only_with_the_token():
    """The real CLI on a real socket: 127.0.0.2 (loopback to the kernel, beyond loopback to us)."""
    host = "127.0.0.2"
    port = _free_port(host)
    flags = ("--allow-remote", "--auth-token-env", "MCP_TOKEN")
    with mcp_over_http(host, port, *flags, env={"MCP_TOKEN": TOKEN}) as served:
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
        }
        headers = {"accept": "application/json, text/event-stream"}
        with httpx2.Client(base_url=f"http://{host}:{port}", timeout=30) as client:
            assert client.post("/mcp", json=hello, headers=headers).status_code == 401
            auth = {**headers, "authorization": f"Bearer {TOKEN}"}
            assert client.post("/mcp", json=hello, headers={**auth, "host": EVIL_HOST}).status_code == 421
            welcome = client.post("/mcp", json=hello, headers=auth)
            assert welcome.status_code == 200 and "hyperpod-debugger" in welcome.text
    err = served.stderr
    assert "warning:" in err and "AWS credentials" in err
    assert TOKEN not in err
