"""Recorded answers of a demo Slurm controller to :func:`hyperpod_debugger.slurm.parse.slurm_query_command`.

The fake Session Manager responder returns :func:`controller_reply` for the controller node. The
text follows what Slurm 23.11 prints for each section (``scontrol ping``, ``scontrol show config``,
``sinfo -N -o``, ``scontrol show node --oneliner``, ``squeue -o`` twice, ``systemctl is-active``),
with faults switched on by name:

* ``node_down_unexpected_reboot``: the first node ``down*``, reason ``Node unexpectedly rebooted``;
* ``drained_kill_task_failed``: the second node drained by root, reason ``Kill task failed``;
* ``action_replace``: the third node ``fail``, reason ``Action:Replace`` (HyperPod replacing it);
* ``completing_jobs``: a job stuck COMPLETING for 25 minutes on the fourth node;
* ``munge_down``: munge inactive on the controller, so every Slurm command fails authentication;
* ``slurmctld_down``: slurmctld failed, ``scontrol ping`` says DOWN and nothing else answers.

Each node fault always lands on the same node (first, second, third, fourth), wrapping round on a
small cluster, where the first fault listed above wins a shared node.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hyperpod_debugger.slurm.parse import MARKER, QUERY_KEYS

FAULTS = frozenset(
    {
        "node_down_unexpected_reboot",
        "drained_kill_task_failed",
        "action_replace",
        "completing_jobs",
        "munge_down",
        "slurmctld_down",
    }
)
_NODE_FAULTS = ("node_down_unexpected_reboot", "drained_kill_task_failed", "action_replace", "completing_jobs")
CONTROLLER_HOST = "ip-10-1-0-10"
PARTITION = "dev"
_DEFAULT_NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _ts(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def _scontrol_line(name: str, state: str, reason: str | None, boot: datetime, now: datetime) -> str:
    fields = [
        f"NodeName={name} Arch=x86_64 CoresPerSocket=48",
        "CPUAlloc=0 CPUEfctv=192 CPUTot=192 CPULoad=0.41",
        "AvailableFeatures=(null) ActiveFeatures=(null)",
        "Gres=gpu:8(S:0-1)",
        f"NodeAddr={name} NodeHostName={name} Version=23.11.10",
        "OS=Linux 5.15.0-1063-aws #69~20.04.1-Ubuntu SMP Fri Jun 14 18:09:08 UTC 2024",
        "RealMemory=1900000 AllocMem=0 FreeMem=1843122 Sockets=2 Boards=1",
        f"State={state} ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        f"Partitions={PARTITION}",
        f"BootTime={_ts(boot)} SlurmdStartTime={_ts(boot + timedelta(minutes=2))}",
        f"LastBusyTime={_ts(now - timedelta(minutes=40))} ResumeAfterTime=None",
        "CfgTRES=cpu=192,mem=1900000M,billing=192,gres/gpu=8 AllocTRES=",
        "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/a ExtSensorsWatts=0 ExtSensorsTemp=n/a",
    ]
    if reason:
        fields.append(f"Reason={reason}")
    return " ".join(fields)


def controller_reply(
    node_names: list[str],
    faults: set[str] | frozenset[str],
    *,
    now: datetime | None = None,
    controller_host: str = CONTROLLER_HOST,
) -> str:
    """The full stdout of the query on the demo controller for these Slurm node names."""
    unknown = set(faults) - FAULTS
    if unknown:
        raise ValueError(f"unknown Slurm faults: {sorted(unknown)}")
    now = now or _DEFAULT_NOW
    boot = now - timedelta(days=3)
    assigned: dict[str, str] = {}
    if node_names:
        for position, fault in enumerate(_NODE_FAULTS):
            if fault in faults:
                assigned[fault] = node_names[position % len(node_names)]

    sections: dict[str, str] = {}
    munge_down = "munge_down" in faults
    ctld_down = "slurmctld_down" in faults
    services = {"slurmctld": "failed" if ctld_down else "active", "munge": "inactive" if munge_down else "active"}
    sections["services"] = "\n".join(f"{unit} {state}" for unit, state in services.items())

    if munge_down or ctld_down:
        if munge_down:
            socket = 'Failed to access "/run/munge/munge.socket.2": No such file or directory'
            error = "Protocol authentication error"
            prefix = f"error: Munge encode failed: {socket}\n"
        else:
            error = "Unable to contact slurm controller (connect failure)"
            prefix = ""
        sections["ping"] = (
            f"{prefix.replace('error:', 'scontrol: error:')}Slurmctld(primary) at {controller_host} is DOWN"
        )
        sections["config"] = f"slurm_load_ctl_conf error: {error}"
        sections["sinfo"] = f"{prefix.replace('error:', 'sinfo: error:')}slurm_load_partitions: {error}"
        sections["nodes"] = f"slurm_load_node error: {error}"
        sections["squeue"] = f"slurm_load_jobs error: {error}"
        sections["jobs"] = f"slurm_load_jobs error: {error}"
        return _render(sections)

    sections["ping"] = f"Slurmctld(primary) at {controller_host} is UP"
    sections["config"] = "\n".join(
        [
            f"Configuration data as of {_ts(now)}",
            "AccountingStorageBackupHost = (null)",
            "AccountingStorageEnforce = none",
            "AccountingStorageHost   = localhost",
            "AccountingStorageExternalHost = (null)",
        ]
    )
    sinfo: list[str] = []
    nodes: list[str] = []
    squeue: list[str] = []
    allocated: list[str] = []
    for index, name in enumerate(node_names):
        short, long_state, reason, scontrol_reason, node_boot = "idle", "IDLE", None, None, boot
        if assigned.get("node_down_unexpected_reboot") == name:
            node_boot = now - timedelta(minutes=18)
            reason = (
                f"Node unexpectedly rebooted boot_time={int(node_boot.timestamp())} "
                f"last response={int((node_boot - timedelta(minutes=3)).timestamp())}"
            )
            short, long_state = "down*", "DOWN+NOT_RESPONDING"
            scontrol_reason = f"{reason} [slurm@{_ts(now - timedelta(minutes=16))}]"
            stamp = now - timedelta(minutes=16)
        elif assigned.get("drained_kill_task_failed") == name:
            reason = "Kill task failed"
            short, long_state = "drained", "IDLE+DRAIN"
            stamp = now - timedelta(hours=2, minutes=7)
            scontrol_reason = f"{reason} [root@{_ts(stamp)}]"
        elif assigned.get("action_replace") == name:
            reason = "Action:Replace"
            short, long_state = "fail", "IDLE+FAIL"
            stamp = now - timedelta(minutes=9)
            scontrol_reason = f"{reason} [root@{_ts(stamp)}]"
        elif assigned.get("completing_jobs") == name:
            short, long_state = "completing", "IDLE+COMPLETING"
        elif index % 3 == 1:
            short, long_state = "allocated", "ALLOCATED"
            allocated.append(name)
        if reason is None:
            sinfo.append(f"{name}|{short}|none|Unknown")
        else:
            sinfo.append(f"{name}|{short}|{reason}|{_ts(stamp)}")
        nodes.append(_scontrol_line(name, long_state, scontrol_reason, node_boot, now))
    if "completing_jobs" in assigned:
        stuck = assigned["completing_jobs"]
        squeue.append(f"4127|COMPLETING|25:13|{stuck}|{stuck}")
        healthy = [n for n in node_names if n not in assigned.values()]
        if healthy:
            squeue.append(f"4133|CONFIGURING|0:42|{healthy[0]}|None")
    sections["sinfo"] = "\n".join(sinfo)
    sections["nodes"] = "\n".join(nodes)
    sections["squeue"] = "\n".join(squeue)
    sections["jobs"] = "\n".join(_jobs(allocated, assigned.get("completing_jobs")))
    return _render(sections)


def _jobs(allocated: list[str], completing: str | None) -> list[str]:
    """The ``jobs`` section (``%i|%T|%u|%D|%N|%j``): one training job across every allocated node, and the
    job stuck completing. Node lists are comma-separated names, as squeue prints names that share no
    bracketed range (``ip-10-1-2-[3-4]`` is what it prints for names that do; the parser reads both)."""
    out = []
    if allocated:
        out.append(f"4123|RUNNING|alice|{len(allocated)}|{','.join(allocated)}|llama-pretrain")
    if completing:
        out.append(f"4127|COMPLETING|bob|1|{completing}|eval-sweep")
    return out


def _render(sections: dict[str, str]) -> str:
    out: list[str] = []
    for key in QUERY_KEYS:
        out.append(MARKER.format(key=key))
        if sections.get(key):
            out.append(sections[key])
    return "\n".join(out) + "\n"
