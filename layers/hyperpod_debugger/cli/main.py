"""``hyperpod-debugger``: triage | probe | job | analyze | findings | support-case | mcp | probe-script | runbook |
demo | schema | iam-policy.

Exit codes (:data:`EXIT_CODES`): 0 no problem at or above --fail-on; 1 such a problem; 2 invalid arguments
or input; 3 could not look (no usable credentials, no such cluster, access denied to the first calls, an
endpoint that does not answer, an input that cannot be read); 4 the tool itself failed (a bug); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from datetime import UTC, datetime, timedelta
from importlib import resources
from importlib.metadata import entry_points
from typing import Any, Literal

from hyperpod_debugger import __version__
from hyperpod_debugger.aws.region import region_for
from hyperpod_debugger.cli import findings as findings_cli
from hyperpod_debugger.cli import job as job_cli
from hyperpod_debugger.cli import support_case as support_case_cli
from hyperpod_debugger.cli.common import PROFILE_HELP, REGION_HELP
from hyperpod_debugger.domain import validate

EXIT_INVALID = 2
EXIT_COULD_NOT_LOOK = 3
EXIT_INTERNAL = 4
#: --orchestrator as the evaluators name it
_ORCHESTRATORS: dict[str, Literal["EKS", "Slurm"]] = {"eks": "EKS", "slurm": "Slurm"}


def _hours(value: str) -> timedelta:
    try:
        hours = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of hours") from exc
    if not 0 < hours <= 24 * 90:
        raise argparse.ArgumentTypeError("the window must be between 0 and 2160 hours")
    return timedelta(hours=hours)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hyperpod-debugger",
        description="Read-only triage for Amazon SageMaker HyperPod clusters and nodes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_triage(sub)
    _add_probe(sub)
    job_cli.add_parser(sub)
    _add_demo(sub)
    _add_analyze(sub)
    findings_cli.add_parser(sub)
    support_case_cli.add_parser(sub)
    _add_mcp(sub)
    _add_printers(sub)
    return parser


def _add_triage(sub: argparse._SubParsersAction) -> None:
    triage = sub.add_parser(
        "triage",
        help="triage one cluster: cluster-level checks, orchestrator, and on-node probes",
        description="Read-only triage of one HyperPod cluster: its API state, events, network, orchestrator "
        "and, through Session Manager, its nodes. Nothing is changed; commands that would change "
        "something are only suggested.",
        epilog="example:\n  hyperpod-debugger triage --cluster ml-eks-prod --profile prod\n"
        "  hyperpod-debugger triage --cluster ml-eks-prod --node i-0123456789abcdef0 --output json\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    triage.add_argument("--cluster", required=True, help="HyperPod cluster name or ARN")
    triage.add_argument("--region", help=REGION_HELP)
    triage.add_argument("--profile", help=PROFILE_HELP)
    triage.add_argument("--node", help="focus on one node (EC2 instance id); it must belong to the cluster")
    triage.add_argument(
        "--since-hours",
        type=_hours,
        default=timedelta(hours=24),
        dest="event_window",
        help="cluster-event window in hours (default 24)",
    )
    triage.add_argument(
        "--log-days",
        type=lambda v: _hours(str(float(v) * 24)),
        default=timedelta(days=7),
        dest="log_window",
        help="health-agent log window in days (default 7)",
    )
    _output_arguments(triage)
    _probe_arguments(triage)
    triage.add_argument("--no-probe", action="store_true", help="skip the on-node probe (cluster-level checks only)")
    triage.add_argument(
        "--max-probe-nodes",
        type=_positive_int,
        default=25,
        help="probe at most N nodes per run, suspect and accelerator nodes first (default 25)",
    )


def _add_probe(sub: argparse._SubParsersAction) -> None:
    probe = sub.add_parser(
        "probe",
        help="run the read-only probe on one node through Session Manager",
        description="Run probe.sh (read-only) on one node through a Session Manager session and judge its output.",
        epilog="example:\n  hyperpod-debugger probe --cluster ml-eks-prod --node i-0123456789abcdef0\n\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    probe.add_argument("--cluster", required=True, help="HyperPod cluster name or ARN")
    probe.add_argument("--region", help=REGION_HELP)
    probe.add_argument("--profile", help=PROFILE_HELP)
    probe.add_argument("--node", required=True, help="the node's EC2 instance id")
    _output_arguments(probe)
    _probe_arguments(probe)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="triage two simulated clusters in an embedded moto server (no AWS account)")
    demo.add_argument("--json", action="store_true")
    demo.add_argument("--no-color", action="store_true")
    demo.add_argument("--verbose", action="store_true", help="the full reports, every finding with its evidence")
    demo.add_argument(
        "--serve",
        action="store_true",
        help="start the demo's simulated account and keep it running (until Ctrl-C) instead of the demo: it prints "
        "the environment variables that point the CLI, in another shell, at it",
    )


def _add_analyze(sub: argparse._SubParsersAction) -> None:
    analyze = sub.add_parser(
        "analyze",
        help="evaluate a saved probe document (or a folder of raw outputs) without AWS access",
        description="Judge what a node printed, offline: probe.sh's JSON, or a folder of saved outputs named "
        "<item_id>.txt (kernel_log.txt for dmesg or journalctl -k, nvidia_smi_q.txt for nvidia-smi -q, ...).",
        epilog="example:\n  hyperpod-debugger analyze --raw-dir ./node-logs --instance-type ml.p5.48xlarge\n\n"
        + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = analyze.add_mutually_exclusive_group(required=True)
    source.add_argument("--probe-output", type=pathlib.Path, help="JSON document printed by probe.sh")
    source.add_argument("--raw-dir", type=pathlib.Path, help="folder of raw outputs named <item_id>.txt")
    analyze.add_argument("--instance-type", required=True, help="e.g. ml.p5.48xlarge")
    analyze.add_argument("--orchestrator", choices=["eks", "slurm"], help="judges containerd/kubelet or slurmd")
    analyze.add_argument("--role", choices=["compute", "controller"], default="compute", help="Slurm node role")
    analyze.add_argument("--now", type=_iso_time, help="evaluation time (default: the document's collected_at)")
    analyze.add_argument(
        "--window-hours",
        type=_hours,
        default=timedelta(hours=24),
        dest="window",
        help="kernel-log window in hours (default 24)",
    )
    analyze.add_argument("--instance-id", help="the node's instance id (fills suggested commands)")
    analyze.add_argument("--instance-group", help="the node's instance group")
    analyze.add_argument("--cluster", help="cluster name (fills suggested commands)")
    analyze.add_argument("--region", help="cluster Region (fills suggested commands)")
    _output_arguments(analyze, short_form=False)  # one node: the report is always in full


def _add_mcp(sub: argparse._SubParsersAction) -> None:
    mcp = sub.add_parser(
        "mcp",
        help="serve the read-only tools to an agent over the Model Context Protocol (stdio by default)",
        description="A Model Context Protocol server whose tools triage, analyze, read the findings table, the "
        "runbook and the probe script, and draft support cases. Every tool is read-only; suggested commands "
        "come back as text for a person to run.",
    )
    mcp.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    mcp.add_argument(
        "--host",
        default="127.0.0.1",
        help="streamable-http: address to listen on (default 127.0.0.1; any address other than 127.0.0.1, "
        "localhost or ::1 needs --allow-remote)",
    )
    mcp.add_argument("--port", type=_positive_int, default=8000, help="streamable-http: port (default 8000)")
    mcp.add_argument(
        "--allow-remote",
        action="store_true",
        help="streamable-http: allow a --host beyond loopback; whoever reaches the port with the bearer token "
        "runs the triage with your AWS credentials. A token is then required: from --auth-token-env, or "
        "generated and printed once on stderr",
    )
    mcp.add_argument(
        "--auth-token-env",
        metavar="NAME",
        help="streamable-http: require 'Authorization: Bearer <token>', the token read from environment "
        "variable NAME (never from the command line)",
    )
    mcp.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="streamable-http: another Host header value to accept (the name or address clients use; without a "
        "port, --port); repeatable",
    )
    mcp.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="streamable-http: another Origin to accept, as http(s)://host[:port]; repeatable",
    )
    mcp.add_argument("--profile", help=PROFILE_HELP)
    mcp.add_argument(
        "--table",
        default=os.environ.get("HYPERPOD_DEBUGGER_TABLE"),
        help="the monitor's findings table the findings tools read (default $HYPERPOD_DEBUGGER_TABLE)",
    )


def _add_printers(sub: argparse._SubParsersAction) -> None:
    """The commands that print what the package ships: the probe script, the runbook, the schemas, the policy."""
    sub.add_parser("probe-script", help="print the read-only on-node probe script (probe.sh)")
    runbook = sub.add_parser(
        "runbook", help="print a section of the packaged runbook (what an alert's '§ X' points at), or list them"
    )
    runbook.add_argument("section", nargs="?", help="a section id such as D or G.1.a (none: the list of sections)")
    schema = sub.add_parser("schema", help="print the JSON schema of the triage report (or of a finding event)")
    schema.add_argument(
        "--finding-event",
        action="store_true",
        help="the schema of the detail of the finding events the monitor puts on EventBridge instead",
    )
    sub.add_parser("iam-policy", help="print the IAM policy the triage needs (read-only calls + probe sessions)")


EXIT_CODES = (
    "exit codes:\n"
    "  0    no problem at or above --fail-on (default P1) in what could be read\n"
    "  1    a problem at or above --fail-on was found\n"
    "  2    invalid arguments or input (nothing was called or judged)\n"
    "  3    could not look: no usable credentials, no such cluster, access denied to the first calls,\n"
    "       an endpoint that does not answer, an input file or folder that cannot be read\n"
    "  4    the tool itself failed (HYPERPOD_DEBUGGER_DEBUG=1 shows the traceback)\n"
    "  130  interrupted (Ctrl-C)"
)
_RANK = {"P0": 0, "P1": 1, "P2": 2}


def _output_arguments(parser: argparse.ArgumentParser, *, short_form: bool = True) -> None:
    parser.add_argument("--output", choices=["text", "json"], default=None, help="report format (default text)")
    parser.add_argument("--json", action="store_true", help="the same as --output json (documented schema)")
    parser.add_argument("--no-color", action="store_true", help="never colour the text report")
    if short_form:
        parser.add_argument(
            "--verbose",
            action="store_true",
            help="every finding with its evidence and commands (default: node verdicts and cluster problems)",
        )
    parser.add_argument(
        "--fail-on",
        choices=["P0", "P1", "P2"],
        default="P1",
        help="exit 1 when a problem of this priority or more urgent is found (default P1)",
    )


def _wants_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False)) or getattr(args, "output", None) == "json"


def _exit_code(report: Any, fail_on: str) -> int:
    """The report's exit code, with --fail-on deciding which problems count (an error, or a run that could not
    look at all, keeps its code)."""
    if report.error is not None or report.exit_code == EXIT_COULD_NOT_LOOK:
        return int(report.exit_code)
    limit = _RANK[fail_on]
    return int(
        any(f.is_problem and f.priority is not None and _RANK[str(f.priority)] <= limit for f in report.findings)
    )


def _refuse(args: argparse.Namespace, message: str, code: int = EXIT_INVALID) -> int:
    """Invalid arguments (or, with ``code`` 3, an input that cannot be read): a clear message on stderr, and under
    --json the JSON report with the error too. The message is shown safely: a file name or a byte read from
    the input never reaches the terminal as a control character."""
    from hyperpod_debugger.domain.untrusted import visible

    message = visible(message)
    if _wants_json(args):
        from hyperpod_debugger.domain.model import ClusterRef, Coverage, RunError
        from hyperpod_debugger.report.text import render_json
        from hyperpod_debugger.run_report import build_report

        report = build_report(
            None,
            datetime.now(UTC),
            ClusterRef(
                name=str(getattr(args, "cluster", None) or "unknown"), region=getattr(args, "region", None) or "unknown"
            ),
            [],
            Coverage(),
            error=RunError(kind="invalid_argument" if code == EXIT_INVALID else "internal", message=message),
        )
        sys.stdout.write(render_json(report))
    print(f"hyperpod-debugger {args.command}: error: {message}", file=sys.stderr)
    return code


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from exc
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from exc
    if number <= 0:
        raise argparse.ArgumentTypeError("must be above 0")
    return number


def _probe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--probe-rate",
        type=_positive_float,
        default=3.0,
        help="StartSession calls per second (SSM allows about 3 per account; default 3)",
    )
    parser.add_argument(
        "--probe-timeout",
        type=_positive_float,
        default=180.0,
        help="seconds one node's probe may take before it is reported TIMEOUT (default 180)",
    )


def _iso_time(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not an ISO-8601 time") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class _Progress:
    """One status line on stderr, rewritten in place, only when stderr is a terminal (never in a pipe or a
    log file); ``done`` clears it before the report is printed."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)()) and os.environ.get("TERM") != "dumb"
        self.started = datetime.now(UTC)

    def __call__(self, message: str) -> None:
        if self.live:
            seconds = int((datetime.now(UTC) - self.started).total_seconds())
            self.stream.write(f"\r\x1b[K[{seconds:>3}s] {message}")
            self.stream.flush()

    def done(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _use_colour(args: argparse.Namespace) -> bool:
    return (
        not args.no_color and sys.stdout.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
    )


def cmd_triage(args: argparse.Namespace) -> int:
    from hyperpod_debugger.aws.clients import AwsClients
    from hyperpod_debugger.probe.options import ProbeOptions
    from hyperpod_debugger.report.text import render_json, render_text
    from hyperpod_debugger.triage import TriageRequest, run_triage

    try:
        cluster = validate.cluster(args.cluster)
        region = region_for(args.cluster, args.region, profile=args.profile)
        node = validate.instance_id(args.node) if args.node else None
    except validate.InvalidArgument as exc:
        return _refuse(args, str(exc))
    options = ProbeOptions(
        max_nodes=getattr(args, "max_probe_nodes", 1), rate=args.probe_rate, timeout=args.probe_timeout
    )
    probe_only = args.command == "probe"
    progress = _Progress()
    report = run_triage(
        TriageRequest(
            cluster=cluster,
            region=region,
            node=node,
            event_window=getattr(args, "event_window", timedelta(hours=24)),
            log_window=getattr(args, "log_window", timedelta(days=7)),
            probe=probe_only or not args.no_probe,
            probe_options=options,
            probe_only=probe_only,
            check_node=True,
            progress=progress if progress.live else None,
        ),
        AwsClients.for_profile(region, args.profile),
    )
    progress.done()
    as_json = _wants_json(args)
    text = render_text(report, colour=_use_colour(args), verbose=args.verbose)
    sys.stdout.write(render_json(report) if as_json else text)
    if report.error is not None and not as_json:
        print(f"hyperpod-debugger: {report.error.message}", file=sys.stderr)
    return _exit_code(report, args.fail_on)


#: Where the simulator registers the demo (sim/pyproject.toml); the core never imports the simulator.
COMMANDS_GROUP = "hyperpod_debugger.commands"


def cmd_demo(args: argparse.Namespace) -> int:
    found = [e for e in entry_points(group=COMMANDS_GROUP) if e.name == "demo"]
    try:
        run_demo = found[0].load() if found else None
    except ImportError as exc:
        print(f"the demo's simulator is installed but cannot load: {exc}", file=sys.stderr)
        return 1
    if run_demo is None:
        print(
            "the demo runs on the simulated account, a package of its own: from a checkout, "
            "`make demo` (or `pip install -e ./sim`, then `hyperpod-debugger demo`)",
            file=sys.stderr,
        )
        return 1
    if args.serve:
        return _serve_demo(found[0].module)
    return int(run_demo(json_output=args.json, colour=_use_colour(args), verbose=args.verbose))


#: the variables of the simulated account a CLI in another shell needs (moto's endpoint, the fake Session
#: Manager's, the credentials and Region moto accepts, no profile or instance metadata)
_SIM_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SSM",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_EC2_METADATA_DISABLED",
)


def _serve_demo(module_name: str) -> int:
    """``demo --serve``: the demo's simulated account (moto, the fake Session Manager agents, the fake Kubernetes
    API, both clusters seeded), kept until Ctrl-C; the lines to paste into another shell are printed first."""
    import importlib
    import shlex
    import signal
    import threading

    simulator = importlib.import_module(module_name)
    with simulator.simulated_world(datetime.now(UTC)) as world:
        names = ", ".join(c.name for c in (world.demo.eks, world.demo.slurm))
        print(f"The demo's simulated account is running (clusters {names}). In another shell:\n")
        for name in _SIM_VARIABLES:
            if name in os.environ:
                print(f"export {name}={shlex.quote(os.environ[name])}")
        print(f"hyperpod-debugger triage --cluster {world.demo.slurm.name}\n\nCtrl-C stops it.", flush=True)
        signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops it as Ctrl-C does, the account torn down
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            print("the simulated account is stopped", file=sys.stderr)
    return 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def cmd_analyze(args: argparse.Namespace) -> int:
    from hyperpod_debugger.cli.analyze import NotText, check_raw_dir, read_text_input
    from hyperpod_debugger.domain import catalog
    from hyperpod_debugger.probe import document
    from hyperpod_debugger.probe.parse import klog
    from hyperpod_debugger.report.analysis import analyze
    from hyperpod_debugger.report.text import render_json, render_text

    try:
        instance_id = validate.instance_id(args.instance_id) if args.instance_id else None
        cluster = validate.cluster(args.cluster) if args.cluster else None
        region = validate.region(args.region) if args.region else None
        if args.probe_output is not None:
            doc = document.loads(read_text_input(args.probe_output))
        else:
            check_raw_dir(args.raw_dir)
            doc = document.from_raw_dir(args.raw_dir, collected_at=args.now)
    except (validate.InvalidArgument, document.ProbeDocumentError, NotText) as exc:
        return _refuse(args, str(exc))
    except OSError as exc:
        return _refuse(args, f"cannot read {exc.filename or 'the input'}: {exc.strerror or exc}", EXIT_COULD_NOT_LOOK)
    if catalog.spec_for(args.instance_type) is None:
        return _refuse(
            args,
            f"unknown instance type {args.instance_type!r}: the checks would judge counts against nothing. "
            f"Known: {', '.join(catalog.known_types())}; and the CPU-only families {catalog.cpu_families()} "
            "(e.g. ml.m5.xlarge)",
        )
    now = args.now or doc.collected_at
    notes: tuple[str, ...] = ()
    if now is None:
        newest = klog.newest_time(doc, datetime.now(UTC))
        if newest is not None:
            now = newest
            notes = (
                f"Judged as of {klog.stamp(newest)}, the newest time in the kernel log (no --now, and the files "
                "carry no collection time): the window ends there",
            )
        else:
            now = datetime.now(UTC)
    report = analyze(
        doc,
        instance_type=args.instance_type,
        now=now,
        notes=notes,
        orchestrator=_ORCHESTRATORS.get(args.orchestrator or ""),
        role=args.role,
        window=args.window,
        instance_id=instance_id,
        instance_group=args.instance_group,
        cluster_name=cluster,
        region=region,
    )
    text = render_text(report, colour=_use_colour(args), verbose=True)
    sys.stdout.write(render_json(report) if _wants_json(args) else text)
    return _exit_code(report, args.fail_on)


def cmd_probe_script(_: argparse.Namespace) -> int:
    sys.stdout.write(resources.files("hyperpod_debugger.probe").joinpath("probe.sh").read_text())
    return 0


def cmd_runbook(args: argparse.Namespace) -> int:
    """The packaged runbook's section (alerts without a runbook URL point here), or the list of sections."""
    from hyperpod_debugger.domain.sections import RUNBOOK_PATH, SECTIONS
    from hyperpod_debugger.report.runbook import UnknownSection, section_text

    if not args.section:
        sys.stdout.write("".join(f"§ {sid:6} {title}\n" for sid, title in SECTIONS.items()))
        return 0
    wanted = str(args.section).strip().removeprefix("§").strip()
    try:
        text, cut = section_text(wanted)
    except UnknownSection as exc:
        print(f"hyperpod-debugger: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    if cut:
        sys.stdout.write(f"\n[… section cut here; the whole runbook: {RUNBOOK_PATH} in the package]\n")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    if getattr(args, "finding_event", False):
        from hyperpod_debugger.notify import finding_event

        print(json.dumps(finding_event.schema(), indent=2))
        return 0
    from hyperpod_debugger.domain.model import TriageReport

    print(json.dumps(TriageReport.model_json_schema(), indent=2))
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from hyperpod_debugger.agent.server import build_server
    except ImportError as exc:
        print(
            f"the MCP server needs the Model Context Protocol SDK ({exc.name} is missing): "
            "pip install 'hyperpod-debugger[mcp]'",
            file=sys.stderr,
        )
        return 1
    if args.transport == "stdio":
        http_only = [
            flag
            for flag, given in (
                ("--allow-remote", args.allow_remote),
                ("--auth-token-env", args.auth_token_env),
                ("--allowed-host", args.allowed_host),
                ("--allowed-origin", args.allowed_origin),
            )
            if given
        ]
        if http_only:
            return _refuse(args, f"{', '.join(http_only)}: for --transport streamable-http only")
        build_server(profile=args.profile, table=args.table).run("stdio")
        return 0
    return _serve_mcp_http(args)


def _serve_mcp_http(args: argparse.Namespace) -> int:
    """``mcp --transport streamable-http``: loopback unless --allow-remote; beyond it, a bearer token always."""
    from hyperpod_debugger.agent import server as mcp_server

    if not mcp_server.is_loopback(args.host) and not args.allow_remote:
        return _refuse(
            args,
            f"--host {args.host} is not a loopback address (127.0.0.1, localhost or ::1): anyone who can reach "
            "it could run the triage, on-node probes included, with your AWS credentials. Reach a loopback "
            "server through an SSH tunnel, or add --allow-remote (a bearer token is then required)",
        )
    token: str | None = None
    generated = False
    if args.auth_token_env:
        token = os.environ.get(args.auth_token_env)
        if not token:
            return _refuse(
                args, f"--auth-token-env: the environment variable {args.auth_token_env} is not set or is empty"
            )
    elif args.allow_remote:
        token, generated = mcp_server.new_token(), True
    try:
        access = mcp_server.http_access(
            args.host, args.port, extra_hosts=args.allowed_host, extra_origins=args.allowed_origin, token=token
        )
    except mcp_server.AccessError as exc:
        return _refuse(args, str(exc))
    prefix = f"hyperpod-debugger {args.command}:"
    if not access.loopback:
        for line in mcp_server.exposure_warning(access, args.profile).splitlines():
            print(f"{prefix} {line}", file=sys.stderr)
    if generated:
        print(
            f"{prefix} bearer token for this run (shown once; send 'Authorization: Bearer <token>'): {token}",
            file=sys.stderr,
        )
    elif token is not None:
        print(f"{prefix} requests must carry the bearer token from ${args.auth_token_env}", file=sys.stderr)
    print(f"{prefix} serving {access.url}", file=sys.stderr)
    mcp_server.serve_http(mcp_server.build_server(profile=args.profile, table=args.table), access)
    return 0


def cmd_iam_policy(_: argparse.Namespace) -> int:
    from hyperpod_debugger.aws.iam import policy_json

    sys.stdout.write(policy_json())
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from hyperpod_debugger.domain.redact import install_log_redaction

    install_log_redaction()  # whatever a library logs (botocore's bodies, the MCP server's requests) is redacted
    handler = {
        "triage": cmd_triage,
        "probe": cmd_triage,
        "job": job_cli.cmd_job,
        "demo": cmd_demo,
        "analyze": cmd_analyze,
        "findings": findings_cli.cmd_findings,
        "support-case": support_case_cli.cmd_support_case,
        "mcp": cmd_mcp,
        "probe-script": cmd_probe_script,
        "runbook": cmd_runbook,
        "schema": cmd_schema,
        "iam-policy": cmd_iam_policy,
    }[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the outermost boundary: a message, not a traceback
        if os.environ.get("HYPERPOD_DEBUGGER_DEBUG"):
            raise
        from hyperpod_debugger.domain.untrusted import visible

        print(
            f"hyperpod-debugger: unexpected error: {type(exc).__name__}: {visible(str(exc))} "
            "(set HYPERPOD_DEBUGGER_DEBUG=1 to see the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
