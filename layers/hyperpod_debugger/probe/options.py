"""How a triage probes nodes: how many, how fast, how long, through which pinned documents. Kept apart from the
runner so that what plans a probe run does not load what runs one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from hyperpod_debugger.aws.ssm_documents import NO_DOCUMENTS

if TYPE_CHECKING:
    from hyperpod_debugger.aws.ssm_documents import SessionDocuments
    from hyperpod_debugger.probe.pace import PaceClock, PaceReport


@dataclass(frozen=True, slots=True)
class ProbeOptions:
    max_nodes: int = 25
    rate: float = 3.0
    concurrency: int = 16
    timeout: float = 180.0
    window: timedelta = timedelta(hours=24)
    #: pinned Session documents (the monitor's stack): sessions run only the commands they carry
    documents: SessionDocuments = NO_DOCUMENTS
    #: told "probed 3 of 25 nodes" as sessions end (the CLI shows it on a terminal); None: silent
    progress: Callable[[str], None] | None = field(default=None, compare=False)
    #: no session starts after this moment (the sweep's round closes); the nodes not started stay due
    start_until: datetime | None = None
    #: the pace's clock (None: :data:`SYSTEM_CLOCK`); tests inject a simulated one
    clock: PaceClock | None = field(default=None, compare=False)
    #: told how the run paced its StartSession calls once it ends (the probe batch logs it); None: nobody
    on_pace: Callable[[PaceReport], None] | None = field(default=None, compare=False)
    #: the nodes given are one batch of the sweep's rotation, not the cluster's node list: the software comparison
    #: (§ E) then says it saw part of each group, and resolves no stored skew
    batch: bool = False
