"""The ticket catalog ``references/node-issue-catalog.md`` keeps its shape and its links.

The catalog lists recurring customer-ticket patterns. Each ``###`` entry has a stable id and
exactly five labelled fields; every link into the runbook must land on a real heading of
``references/node-diagnostics-detail.md`` (slugs computed here, independently of the product
code); the patterns on-call needs are all present; state-changing commands never appear as code
in the catalog (they live in the runbook's suggested-command blocks); and the escalation and
support-case sections exist with their key content.

Each check is a helper that returns a list of problems. The real files must produce none, and
``test_each_check_catches_a_broken_copy`` writes broken copies of the real catalog to a
temporary directory to show that every check can fail.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from hyperpod_debugger.domain.sections import SECTIONS, anchor
from tests.markdown import github_slug, scan

ROOT = pathlib.Path(__file__).resolve().parents[2]
CATALOG = ROOT / "references" / "node-issue-catalog.md"
RUNBOOK = ROOT / "references" / "node-diagnostics-detail.md"

LABELS = ("Symptom", "Likely cause", "Confirm (read-only)", "Fix", "Runbook")

ENTRY_RE = re.compile(r"^(?P<id>[A-Z]+-[0-9]+) (?P<title>\S.*)$")
FIELD_RE = re.compile(r"^\*\*(?P<label>[^*]+?):\*\*(?P<text>.*)$", re.DOTALL)
INLINE_CODE_RE = re.compile(r"`([^`\n]+)`")
#: A link into the runbook, as the catalog writes it: ``[§ A](node-diagnostics-detail.md#a-...)``.
SECTION_LINK_RE = re.compile(r"\[§ (?P<label>[^\]]+)\]\(node-diagnostics-detail\.md#(?P<anchor>[^)\s]*)\)")
#: Any link target inside the runbook file, whatever its text.
RUNBOOK_TARGET_RE = re.compile(r"\]\(node-diagnostics-detail\.md#(?P<anchor>[^)\s]*)\)")
IN_PAGE_LINK_RE = re.compile(r"\]\(#(?P<anchor>[^)\s]+)\)")

#: State-changing commands. None of them may appear as code in the catalog, and prose may only
#: name one in a sentence that links to the runbook block that holds it.
MUTATING_MARKERS = (
    "batch-reboot-cluster-nodes",
    "batch-replace-cluster-nodes",
    "authorize-security-group",
    "revoke-security-group",
    "modify-vpc-attribute",
    "modify-vpc-endpoint",
    "create-vpc-endpoint",
    "delete-vpc-endpoints",
    "replace-route",
    "update-cluster",
    "start-cluster-health-check",
    "request-service-quota-increase",
    "put-role-policy",
    "attach-role-policy",
    "kubectl drain",
    "kubectl cordon",
    "kubectl uncordon",
    "kubectl label",
    "kubectl delete",
    "kubectl set env",
    "kubectl create",
    "scontrol update",
    "systemctl restart",
    "systemctl start",
    "systemctl stop",
    "systemctl enable",
    "systemctl disable",
    "chronyc makestep",
    "sysctl -w",
    "journalctl --vacuum",
    "image prune",
    "system prune",
    "crictl rmi",
    "pip cache purge",
    "apt-get clean",
    "dos2unix",
    "dcgmi health -s",
    "dcgmi diag",
    "modprobe",
    "nvidia-smi -r",
    "sudo reboot",
)

#: Copies, moves and deletions in S3; copying an object to standard output (``- |``) only reads.
S3_WRITE_RE = re.compile(r"\baws s3 (cp|mv|rm|sync)\b(?!\s+\S+\s+-(\s|$))")

#: Ticket patterns the catalog must cover: for each, one entry must contain every keyword.
REQUIRED_PATTERNS: dict[str, tuple[str, ...]] = {
    "EFA health check failure": ("EFA health checks did not run successfully",),
    "EFA broken after node replacement": ("EFA", "after replacement", "fi_info -p efa"),
    "intermittent EFA/NCCL fallback to TCP": ("NCCL", "TCP", "Using network Socket"),
    "GPU off the bus": ("Xid 79", "fallen off the bus"),
    "uncorrectable ECC": ("Uncorrectable ECC", "ecc.errors.uncorrected.volatile.total"),
    "row remap pending or failure": ("row remap", "remapped_rows.pending", "Remapping Failure"),
    "thermal throttling": ("throttles", "temperature.gpu"),
    "NVLink errors": ("Xid 74", "nvlink"),
    "DCGM health Fail": ("DCGM", "dcgmi health --check"),
    "Neuron device missing": ("neuron-ls", "Neuron devices missing"),
    "Neuron runtime unrecoverable": ("NRT_UNRECOVERABLE_ERROR",),
    "Slurm node unexpectedly rebooted": ("Node unexpectedly rebooted", "slurmd"),
    "jobs stuck COMPLETING after replacement": ("COMPLETING", "replacement", "slurmctld"),
    "GRES miscount": ("GRES", "Reason=Resources"),
    "wrong vCPU count": ("ThreadsPerCore", "96", "192"),
    "lifecycle script S3 timeout": ("Lifecycle", "Connect timeout on endpoint URL"),
    "lifecycle script AccessDenied": ("Lifecycle", "AccessDenied"),
    "lifecycle script CRLF": ("Lifecycle", "CRLF"),
    "lifecycle parameter mismatch": ("Lifecycle", "provisioning_parameters.json"),
    "insufficient capacity": ("We currently do not have sufficient capacity",),
    "aws-node CrashLoopBackOff": ("aws-node", "CrashLoopBackOff", "127.0.0.1:50051"),
    "pods Pending with FailedCreatePodSandBox": ("Pending", "FailedCreatePodSandBox"),
    "root volume full": ("Root volume full", "No space left on device"),
    "OOM cgroup vs system": ("CONSTRAINT_MEMCG", "CONSTRAINT_NONE"),
    "inode exhaustion": ("Inode exhaustion", "df -iP"),
    "fork Cannot allocate memory": ("Cannot allocate memory", "os.fork()", "FI_EFA_USE_HUGE_PAGE"),
    "clock not synchronised": ("Not synchronised", "chronyc tracking"),
    "kernel panic / soft lockup": ("Kernel panic", "soft lockup"),
    "SSM TargetNotConnected": ("TargetNotConnected", "sagemaker-cluster:<cluster-id>_<group>-<instance-id>"),
    "auto-recovery not triggering": ("NodeRecovery", "None", "Automatic"),
    "node stuck after HMA action": ("UnschedulablePendingReplacement", "Action:Replace", "stuck"),
    "application Xid blamed on hardware": ("Xid 13", "31", "43", "never justify a replacement"),
}

ESCALATION_TITLE = "Escalate to AWS Support"
CASE_TITLE = "What to put in a support case"

#: What the escalation section must name (criteria from the upstream list plus our own).
ESCALATION_KEYWORDS = (
    "security group",
    "EFA",
    "flow-log",
    "REJECT",
    "physical host",
    "capacity",
    "Capacity Reservation",
    "five or more",
    "24 hours",
    "NodeLogicalId",
    "UNKNOWN",
)

#: What the support-case checklist must name.
CASE_KEYWORDS = (
    "Cluster name",
    "ARN",
    "Region",
    "Orchestrator",
    "instance ids",
    "instance groups",
    "UTC",
    "verbatim",
    "Xid",
    "ECC",
    "DCGM",
    "aws sagemaker describe-cluster ",
    "aws sagemaker list-cluster-nodes",
    "?InstanceId=='<instance-id>'",
    "aws sagemaker describe-cluster-node",
    "hyperpod-debugger triage --cluster <cluster-name> --region <region> --node <instance-id>",
    "--json > triage.json",
    "/aws/sagemaker/Clusters/<cluster-name>/<cluster-id>",
    "LifecycleConfig/<group>/<instance-id>",
    "SagemakerHealthMonitoringAgent/<group>/<instance-id>",
)


# --------------------------------------------------------------------------- markdown helpers


@dataclass(frozen=True)
class Entry:
    id: str
    title: str
    line: int  # 0-based line of the ### heading
    body: str  # the text after the heading, up to the next heading


def prose(markdown: str) -> str:
    """The document without its fenced code blocks."""
    _, _, outside = scan(markdown)
    lines = markdown.split("\n")
    return "\n".join(lines[number] for number in outside)


def entries(markdown: str) -> list[Entry]:
    headings, _, _ = scan(markdown)
    lines = markdown.split("\n")
    found: list[Entry] = []
    for index, heading in enumerate(headings):
        if heading.level != 3:
            continue
        end = headings[index + 1].line if index + 1 < len(headings) else len(lines)
        match = ENTRY_RE.match(heading.text)
        entry_id, title = (match.group("id"), match.group("title")) if match else ("", heading.text)
        found.append(Entry(entry_id, title, heading.line, "\n".join(lines[heading.line + 1 : end])))
    return found


def paragraphs(text: str) -> list[str]:
    return [
        " ".join(line.strip() for line in block.split("\n"))
        for block in re.split(r"\n\s*\n", text.strip())
        if block.strip()
    ]


def entry_problems(markdown: str) -> list[str]:
    """Every ### entry: an id, then exactly the five labelled fields, in order, none empty."""
    found = entries(markdown)
    if not found:
        return ["the catalog has no ### entries"]
    problems: list[str] = []
    for entry in found:
        where = f"entry on line {entry.line + 1}"
        if not entry.id:
            problems.append(f"{where}: heading {entry.title!r} does not start with an id like EFA-1")
            continue
        where = f"{entry.id} (line {entry.line + 1})"
        fields: list[tuple[str, str]] = []
        for paragraph in paragraphs(entry.body):
            match = FIELD_RE.match(paragraph)
            if match is None:
                problems.append(f"{where}: unlabelled text {paragraph[:60]!r}")
                continue
            fields.append((match.group("label"), match.group("text").strip()))
        labels = tuple(label for label, _ in fields)
        if labels != LABELS:
            problems.append(f"{where}: fields are {labels}, want {LABELS}")
        for label, text in fields:
            if not text:
                problems.append(f"{where}: '**{label}:**' is empty")
        values = dict(fields)
        runbook_line = values.get("Runbook", "")
        links = SECTION_LINK_RE.findall(runbook_line)
        if not links:
            problems.append(f"{where}: the Runbook line has no [§ X](node-diagnostics-detail.md#...) link")
        leftover = SECTION_LINK_RE.sub("", runbook_line).replace(",", "").strip()
        if runbook_line and leftover:
            problems.append(f"{where}: the Runbook line holds more than links: {leftover!r}")
        if "Fix" in values and not RUNBOOK_TARGET_RE.search(values["Fix"]):
            problems.append(f"{where}: the Fix does not point at a runbook section")
    return problems


def duplicate_ids(markdown: str) -> list[str]:
    ids = [entry.id for entry in entries(markdown) if entry.id]
    return sorted({entry_id for entry_id in ids if ids.count(entry_id) > 1})


def runbook_heading_slugs(runbook: str) -> dict[str, str]:
    """Slug of every runbook heading, keyed by the heading text."""
    headings, _, _ = scan(runbook)
    return {heading.text: github_slug(heading.text) for heading in headings}


def link_problems(catalog: str, runbook: str) -> list[str]:
    """Runbook links resolve, and a link labelled § X lands on the heading of section X."""
    heading_slugs = runbook_heading_slugs(runbook)
    known = set(heading_slugs.values())
    by_label: dict[str, str] = {}
    for text, heading_slug in heading_slugs.items():
        by_label.setdefault(text.split(" ", 1)[0], heading_slug)
        by_label.setdefault(text, heading_slug)
    text = prose(catalog)
    problems = [
        f"link to node-diagnostics-detail.md#{target} has no matching runbook heading"
        for target in RUNBOOK_TARGET_RE.findall(text)
        if target not in known
    ]
    for match in SECTION_LINK_RE.finditer(text):
        label, target = match.group("label"), match.group("anchor")
        want = by_label.get(label)
        if want is None:
            problems.append(f"[§ {label}] names no runbook heading")
        elif want != target:
            problems.append(f"[§ {label}] links to #{target}, but that heading's anchor is #{want}")
        if label in SECTIONS and anchor(label) != target:
            problems.append(f"[§ {label}] links to #{target}, but sections.anchor gives #{anchor(label)}")
    return problems


def dangling_in_page_links(catalog: str) -> list[str]:
    headings, _, _ = scan(catalog)
    slugs = {github_slug(heading.text) for heading in headings}
    return sorted({target for target in IN_PAGE_LINK_RE.findall(prose(catalog)) if target not in slugs})


def unindexed_entries(catalog: str) -> list[str]:
    """Entries the ``## Index`` table does not link to."""
    listed = set(IN_PAGE_LINK_RE.findall(section_text(catalog, "Index") or ""))
    return [entry.id for entry in entries(catalog) if github_slug(f"{entry.id} {entry.title}") not in listed]


def mutating_hits(text: str) -> list[str]:
    hits = [marker for marker in MUTATING_MARKERS if marker in text]
    hits += [match.group(0) for match in S3_WRITE_RE.finditer(text)]
    return hits


def mutating_code(markdown: str) -> list[str]:
    """State-changing commands inside fenced blocks or inline code."""
    _, fences, _ = scan(markdown)
    problems = [
        f"code block on line {fence.start + 1} shows {hit!r}" for fence in fences for hit in mutating_hits(fence.body)
    ]
    for span in INLINE_CODE_RE.findall(prose(markdown)):
        command = " ".join(span.split())
        problems += [f"inline code `{command}` shows {hit!r}" for hit in mutating_hits(command)]
    return problems


def mutating_prose(markdown: str) -> list[str]:
    """A state-changing command named in prose must sit in a sentence that links to the runbook."""
    text = INLINE_CODE_RE.sub("", prose(markdown))
    problems: list[str] = []
    for paragraph in paragraphs(text):
        for sentence in re.split(r"(?<=[.;:!?])\s+", paragraph):
            hits = mutating_hits(sentence)
            if hits and not RUNBOOK_TARGET_RE.search(sentence):
                problems.append(f"{hits[0]!r} named without a runbook link: {sentence[:80]!r}")
    return problems


def section_text(markdown: str, title: str) -> str | None:
    """The text under the ``## title`` heading, up to the next level-2 heading."""
    headings, _, _ = scan(markdown)
    lines = markdown.split("\n")
    for index, heading in enumerate(headings):
        if heading.level == 2 and heading.text == title:
            end = next((h.line for h in headings[index + 1 :] if h.level <= 2), len(lines))
            return "\n".join(lines[heading.line + 1 : end])
    return None


def missing_patterns(markdown: str) -> list[str]:
    texts = [f"{entry.id} {entry.title}\n{entry.body}" for entry in entries(markdown)]
    return [
        name
        for name, keywords in REQUIRED_PATTERNS.items()
        if not any(all(keyword in text for keyword in keywords) for text in texts)
    ]


def section_keyword_problems(markdown: str, title: str, keywords: tuple[str, ...]) -> list[str]:
    body = section_text(markdown, title)
    if body is None:
        return [f"no '## {title}' section"]
    return [f"'## {title}' does not mention {keyword!r}" for keyword in keywords if keyword not in body]


def intro_problems(markdown: str) -> list[str]:
    headings, _, _ = scan(markdown)
    first_section = next((h.line for h in headings if h.level == 2), None)
    if first_section is None:
        return ["the catalog has no ## sections"]
    intro = "\n".join(markdown.split("\n")[:first_section])
    return [
        f"the introduction does not mention {phrase!r}"
        for phrase in ("investigate → reboot → replace", "node-diagnostics-detail.md", "UNKNOWN", "suggestion")
        if phrase not in intro
    ]


# --------------------------------------------------------------------------- the real catalog


@pytest.fixture(scope="module")
def catalog() -> str:
    assert CATALOG.is_file(), "references/node-issue-catalog.md is missing"
    return CATALOG.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def runbook() -> str:
    return RUNBOOK.read_text(encoding="utf-8")


def test_every_entry_has_the_five_fields(catalog: str) -> None:
    assert len(entries(catalog)) >= len(REQUIRED_PATTERNS)
    assert entry_problems(catalog) == []


def test_entry_ids_are_unique(catalog: str) -> None:
    assert duplicate_ids(catalog) == []


def test_runbook_links_resolve_to_the_right_headings(catalog: str, runbook: str) -> None:
    assert SECTION_LINK_RE.search(catalog)
    assert link_problems(catalog, runbook) == []


def test_in_page_links_resolve(catalog: str) -> None:
    assert IN_PAGE_LINK_RE.search(catalog)
    assert dangling_in_page_links(catalog) == []


def test_index_lists_every_entry(catalog: str) -> None:
    assert unindexed_entries(catalog) == []


def test_required_patterns_are_covered(catalog: str) -> None:
    assert missing_patterns(catalog) == []


def test_no_state_changing_command_as_code(catalog: str) -> None:
    assert mutating_code(catalog) == []


def test_state_changing_commands_are_only_named_next_to_a_runbook_link(catalog: str) -> None:
    assert mutating_prose(catalog) == []


def test_escalation_section(catalog: str) -> None:
    assert section_keyword_problems(catalog, ESCALATION_TITLE, ESCALATION_KEYWORDS) == []


def test_support_case_checklist(catalog: str) -> None:
    assert section_keyword_problems(catalog, CASE_TITLE, CASE_KEYWORDS) == []


def test_introduction_states_the_policy(catalog: str) -> None:
    assert intro_problems(catalog) == []


# --------------------------------------------------------------------------- every check can fail


def _swap(old: str, new: str, count: int = 1) -> Callable[[str], str]:
    def mutate(text: str) -> str:
        assert old in text, f"the mutation no longer applies: {old!r} is not in the catalog"
        return text.replace(old, new, count)

    return mutate


def _append(extra: str) -> Callable[[str], str]:
    return lambda text: text + extra


_A_LINK = "[§ A](node-diagnostics-detail.md#a-efa-and-security-groups)"

#: case -> (what the mutation breaks: the catalog or the runbook, the mutation, the check).
BROKEN_COPIES: dict[str, tuple[str, Callable[[str], str], Callable[[str, str], list[str]]]] = {
    "a field is missing": (
        "catalog",
        _swap("\n**Likely cause:** The nodes cannot send traffic", "\nThe nodes cannot send traffic"),
        lambda cat, run: entry_problems(cat),
    ),
    "a field renamed": (
        "catalog",
        _swap("**Confirm (read-only):**", "**Checks:**"),
        lambda cat, run: entry_problems(cat),
    ),
    "an entry without an id": (
        "catalog",
        _swap("### EFA-2 EFA broken", "### EFA broken"),
        lambda cat, run: entry_problems(cat),
    ),
    "a runbook line without links": (
        "catalog",
        _swap(f"**Runbook:** {_A_LINK}, [§ B.1]", "**Runbook:** see section A, [§ B.1]"),
        lambda cat, run: entry_problems(cat),
    ),
    "a fix that points nowhere": (
        "catalog",
        _swap(
            "**Fix:** Drain and replace with the blocks in\n[§ F](node-diagnostics-detail.md#f-hardware-faults-and-automatic-recovery); a reboot",
            "**Fix:** Drain and replace the node; a reboot",
        ),
        lambda cat, run: entry_problems(cat),
    ),
    "a duplicate id": (
        "catalog",
        _swap("### EFA-3 Intermittent", "### EFA-2 Intermittent"),
        lambda cat, run: duplicate_ids(cat),
    ),
    "an anchor that does not exist": (
        "catalog",
        _swap(_A_LINK, "[§ A](node-diagnostics-detail.md#a-efa-and-security-group)"),
        link_problems,
    ),
    "a link label that names another section": (
        "catalog",
        _swap(_A_LINK, "[§ A](node-diagnostics-detail.md#b-vpc-and-routing)"),
        link_problems,
    ),
    "a runbook heading renamed under the catalog": (
        "runbook",
        _swap("## A EFA and security groups", "## A EFA and SGs"),
        link_problems,
    ),
    "a broken index link": (
        "catalog",
        _swap("](#efa-1-efa-health-check-fails-at-cluster-creation-or-scale-up)", "](#efa-1-nowhere)"),
        lambda cat, run: dangling_in_page_links(cat),
    ),
    "an entry missing from the index": (
        "catalog",
        _swap("[EFA-2](#efa-2-efa-broken-on-a-node-after-replacement), ", ""),
        lambda cat, run: unindexed_entries(cat),
    ),
    "a required pattern dropped": (
        "catalog",
        _swap("TargetNotConnected", "NotConnected", count=-1),
        lambda cat, run: missing_patterns(cat),
    ),
    "a mutating command as inline code": (
        "catalog",
        _append("\nDrain it first with `kubectl drain <node-name>`.\n"),
        lambda cat, run: mutating_code(cat),
    ),
    "a mutating command in a code block": (
        "catalog",
        _append("\n```bash\naws sagemaker batch-reboot-cluster-nodes --cluster-name c --node-ids i-0\n```\n"),
        lambda cat, run: mutating_code(cat),
    ),
    "an S3 upload as inline code": (
        "catalog",
        _append("\nPublish it with `aws s3 cp on_create.sh s3://bucket/on_create.sh`.\n"),
        lambda cat, run: mutating_code(cat),
    ),
    "a mutating command named in prose without a link": (
        "catalog",
        _append("\nThen run scontrol update on the controller to resume it.\n"),
        lambda cat, run: mutating_prose(cat),
    ),
    "the escalation section renamed": (
        "catalog",
        _swap("## Escalate to AWS Support", "## Escalation"),
        lambda cat, run: section_keyword_problems(cat, ESCALATION_TITLE, ESCALATION_KEYWORDS),
    ),
    "an escalation criterion dropped": (
        "catalog",
        _swap("Attach the VPC flow-log `REJECT` records", "Attach the VPC flow logs"),
        lambda cat, run: section_keyword_problems(cat, ESCALATION_TITLE, ESCALATION_KEYWORDS),
    ),
    "the case checklist loses the JSON report": (
        "catalog",
        _swap("--json > triage.json", "> triage.txt"),
        lambda cat, run: section_keyword_problems(cat, CASE_TITLE, CASE_KEYWORDS),
    ),
    "the introduction loses the ladder": (
        "catalog",
        _swap("investigate → reboot → replace", "investigate first"),
        lambda cat, run: intro_problems(cat),
    ),
}


@pytest.mark.parametrize("case", list(BROKEN_COPIES))
def test_each_check_catches_a_broken_copy(case: str, catalog: str, runbook: str, tmp_path: pathlib.Path) -> None:
    target, mutate, check = BROKEN_COPIES[case]
    assert check(catalog, runbook) == [], "the real files must pass the check first"
    original = catalog if target == "catalog" else runbook
    broken = tmp_path / (CATALOG.name if target == "catalog" else RUNBOOK.name)
    broken.write_text(mutate(original), encoding="utf-8")
    copy = broken.read_text(encoding="utf-8")
    assert copy != original
    problems = check(copy, runbook) if target == "catalog" else check(catalog, copy)
    assert problems, f"the check missed: {case}"


# --------------------------------------------------------------------------- helper details


def test_slug_examples() -> None:
    assert github_slug("G.1.a GPU memory row remapping") == "g1a-gpu-memory-row-remapping"
    assert github_slug("B.1 Subnets, security groups and addressing") == "b1-subnets-security-groups-and-addressing"
    assert (
        github_slug('SLURM-1 Node down with "Node unexpectedly rebooted"')
        == "slurm-1-node-down-with-node-unexpectedly-rebooted"
    )
    assert (
        github_slug("NRN-2 Neuron runtime reports NRT_UNRECOVERABLE_ERROR")
        == "nrn-2-neuron-runtime-reports-nrt_unrecoverable_error"
    )


def test_reading_an_s3_object_is_not_a_mutation() -> None:
    assert mutating_hits("aws s3 cp s3://bucket/on_create.sh - | file -") == []
    assert mutating_hits("aws s3 cp s3://bucket/provisioning_parameters.json -") == []
    assert mutating_hits("aws s3 cp on_create.sh s3://bucket/on_create.sh")


def test_naming_a_command_next_to_its_runbook_block_is_allowed() -> None:
    linked = f"Run batch-replace-cluster-nodes only with the block in {_A_LINK}.\n"
    assert mutating_prose(linked) == []
    assert mutating_prose("Run batch-replace-cluster-nodes now.\n")


def test_commands_in_code_blocks_are_not_prose() -> None:
    doc = "Text.\n\n```bash\nsudo scontrol update nodename=x state=resume\n```\n"
    assert mutating_prose(doc) == []
    assert mutating_code(doc)
