"""Probing many nodes: a StartSession rate limit, bounded concurrency, retries on throttling, and a
typed outcome per node. A node that could not be probed is UNKNOWN (§ K), never a hardware verdict;
when many nodes fail the same way, one cluster-level finding names the likely shared cause.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyperpod_debugger.aws.ssm_types import Outcome, Runner, SessionError
from hyperpod_debugger.domain.catalog import spec_for
from hyperpod_debugger.domain.commands import read_only
from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.probe import document

if TYPE_CHECKING:
    from hyperpod_debugger.domain.observations import ClusterNode

#: StartSession calls per second per account that SSM allows (about 3).
DEFAULT_RATE = 3.0
DEFAULT_CONCURRENCY = 16
DEFAULT_RETRIES = 4
#: One outcome shared by at least this share of probed nodes (and 3 nodes) is a cluster-level problem.
BREAKER_SHARE = 0.5
BREAKER_MIN_NODES = 3


class TokenBucket:
    """``rate`` tokens per second, bursts of ``burst``; ``acquire`` waits for a token."""

    def __init__(self, rate: float, burst: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._clock = clock
        self._last = clock()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                now = self._clock()
                self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
                self._last = now
                # a clock that advances exactly the time asked for can leave the count a rounding error
                # short of a token: count it as one rather than wait a near-zero time for ever
                if self._tokens >= 1 - 1e-9:
                    self._tokens = max(0.0, self._tokens - 1)
                    return
                await asyncio.sleep((1 - self._tokens) / self.rate)


@dataclass(frozen=True, slots=True)
class NodeProbe:
    node: ClusterNode
    target: str
    outcome: Outcome
    message: str
    doc: document.ProbeDocument | None = None
    attempts: int = 1
    seconds: float = 0.0


def order_nodes(nodes: Iterable[ClusterNode], suspects: Iterable[str] = ()) -> list[ClusterNode]:
    """Suspect nodes first (named by events, labels or status), then accelerator nodes, then the rest."""
    named = set(suspects)

    def rank(node: ClusterNode) -> tuple[int, str]:
        if node.instance_id in named or node.status not in ("Running", ""):
            return (0, node.instance_id)
        spec = spec_for(node.instance_type)
        return (1 if spec is not None and spec.accelerated else 2, node.instance_id)

    return sorted(nodes, key=rank)


async def _probe_one(
    node: ClusterNode,
    target: str,
    command: str,
    run: Runner,
    bucket: TokenBucket,
    retries: int,
    rng: random.Random,
) -> NodeProbe:
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        await bucket.acquire()
        try:
            result = await run(target, command)
        except SessionError as exc:
            if exc.outcome == "THROTTLED" and attempt <= retries:
                # Full jitter: spread the retries so throttled callers do not return together.
                await asyncio.sleep(rng.uniform(0, min(8.0, 0.5 * 2**attempt)))
                continue
            return NodeProbe(node, target, exc.outcome, exc.message, None, attempt, time.monotonic() - started)
        elapsed = time.monotonic() - started
        text = result.stdout.decode("utf-8", errors="replace")
        try:
            doc = document.loads(text)
        except document.ProbeDocumentError as exc:
            tail = result.stderr.decode("utf-8", errors="replace").strip()[-300:]
            message = f"the probe did not return its document (exit {result.exit_code}): {exc}"
            if result.truncated:
                message += "; the output was cut at the client's size limit"
            if tail:
                message += f"; stderr: {tail}"
            return NodeProbe(node, target, "ERROR", message, None, attempt, elapsed)
        return NodeProbe(node, target, "OK", "probed", doc, attempt, elapsed)


async def probe_fleet(
    nodes: Sequence[tuple[ClusterNode, str]],
    command: str,
    run: Runner,
    *,
    rate: float = DEFAULT_RATE,
    concurrency: int = DEFAULT_CONCURRENCY,
    retries: int = DEFAULT_RETRIES,
    seed: int | None = None,
) -> list[NodeProbe]:
    """Probe every (node, session target) with at most ``rate`` StartSession calls per second and
    ``concurrency`` sessions open at once. A hung node holds one slot until its own timeout and
    never blocks the others. Results come back in the input order. (When a round closes, the caller's ``run``
    refuses to start: :class:`hyperpod_debugger.probe.pace.SessionPace` decides.)"""
    # A small burst (a tenth of a second's worth) keeps the average at ``rate`` when the event loop
    # wakes a little late; at SSM's 3/s that is a burst of one.
    bucket = TokenBucket(rate, burst=max(1, int(rate // 10)))
    slots = asyncio.Semaphore(max(1, concurrency))
    rng = random.Random(seed)
    # StartSession/TerminateSession are blocking boto3 calls run in threads: give every open slot
    # one (the default pool has cpu + 4 threads, which would cap the StartSession rate on small hosts).
    executor = ThreadPoolExecutor(max_workers=max(4, 2 * concurrency), thread_name_prefix="hpd-ssm")
    asyncio.get_running_loop().set_default_executor(executor)

    async def one(node: ClusterNode, target: str) -> NodeProbe:
        async with slots:
            return await _probe_one(node, target, command, run, bucket, retries, rng)

    try:
        return list(await asyncio.gather(*(one(node, target) for node, target in nodes)))
    finally:
        executor.shutdown(wait=False, cancel_futures=True)


_CAUSES: dict[str, str] = {
    "UNREACHABLE": "the SSM agent is not connected: the node is not Running, its agent is down, or the VPC has "
    "no route to the ssm/ssmmessages endpoints",
    "TIMEOUT": "the session opened but the command did not finish in time: a hung node, or a slow or blocked "
    "ssmmessages path",
    "THROTTLED": "StartSession was still throttled after retries: lower the probe rate or probe fewer nodes",
    "DENIED": "the identity running the probe lacks ssm:StartSession on sagemaker-cluster targets (or "
    "ssmmessages:OpenDataChannel)",
    "ENCRYPTION_REQUIRED": "the account's Session Manager preferences require KMS encryption, which this client "
    "does not implement",
    "ERROR": "the session failed or the probe returned no document",
}


def outcome_findings(
    probes: Sequence[NodeProbe], *, cluster_arn: str | None, cluster_name: str | None, region: str
) -> list[Finding]:
    """UNKNOWN findings (§ K) for every node that could not be probed; one cluster-level finding
    instead of many when one outcome dominates (the circuit breaker)."""
    failed = [p for p in probes if p.outcome != "OK"]
    counts = Counter(p.outcome for p in failed)
    tripped = {outcome for outcome, n in counts.items() if n >= BREAKER_MIN_NODES and n >= BREAKER_SHARE * len(probes)}
    out: list[Finding] = []
    for outcome in sorted(tripped):
        group = [p for p in failed if p.outcome == outcome]
        evidence = [f"{p.node.instance_id} ({p.node.group}): {p.message}" for p in group[:20]]
        if len(group) > 20:
            evidence.append(f"… and {len(group) - 20} more")
        out.append(
            Finding(
                tag=Tag.UNKNOWN,
                priority=Priority.P1,
                check="probe.session",
                section="K",
                message=f"{len(group)} of {len(probes)} probed nodes could not be probed ({outcome}): "
                "a shared cause is likely, not that many node faults",
                cluster_arn=cluster_arn,
                cluster_name=cluster_name,
                evidence=evidence,
                root_cause=_CAUSES[outcome],
                node_action="investigate",
                next_step="Fix the shared path or permission first (§ K), then probe again; do not reboot or replace.",
            )
        )
    for p in failed:
        if p.outcome in tripped:
            continue
        out.append(
            Finding(
                tag=Tag.UNKNOWN,
                priority=Priority.P1,
                check="probe.session",
                section="K",
                message=f"Could not probe node {p.node.instance_id} ({p.outcome}): {p.message}",
                cluster_arn=cluster_arn,
                cluster_name=cluster_name,
                instance_id=p.node.instance_id,
                instance_group=p.node.group,
                evidence=[f"target {p.target}, {p.attempts} attempt(s), {p.seconds:.1f} s"],
                root_cause=_CAUSES[p.outcome],
                node_action="investigate",
                suggested_commands=[
                    read_only(
                        ["aws", "ssm", "start-session", "--region", region, "--target", p.target],
                        "Open a session to the node by hand to see the error yourself",
                    )
                ],
            )
        )
    return out
