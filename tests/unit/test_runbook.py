"""The runbook ``references/node-diagnostics-detail.md`` keeps its contract with the code.

Findings and alerts link to ``references/node-diagnostics-detail.md#<anchor>``, where the anchor
comes from :func:`hyperpod_debugger.domain.sections.anchor`. These tests read the markdown and check
that every section id has its heading at the right level with the right title, that the anchors
agree with an independent slug function, that the table of contents and every in-page link
resolve, and that state-changing commands only ever appear inside a
``**Suggested command (run this yourself)**`` block that states its preconditions, blast radius,
reversibility and an IaC note. Every block carries the IaC note: a configuration change explains
the template drift it causes, and a node-level action says that it causes none.

The helper functions are exercised on small synthetic documents as well, so a broken helper
cannot make the real-document tests pass vacuously.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

import pytest

from hyperpod_debugger.domain.sections import RUNBOOK_PATH, SECTIONS, anchor
from tests.markdown import Fence, Heading, github_slug, scan

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / RUNBOOK_PATH

SUGGESTED_HEADER = "**Suggested command (run this yourself)**"

#: Commands that change state. They may appear only inside suggested-command blocks.
MUTATING_MARKERS = (
    "batch-reboot-cluster-nodes",
    "batch-replace-cluster-nodes",
    "authorize-security-group",
    "revoke-security-group",
    "modify-vpc-attribute",
    "modify-vpc-endpoint",
    "create-vpc-endpoint",
    "replace-route",
    "update-cluster ",
    "update-cluster-config",
    "update-cluster-software",
    "start-cluster-health-check",
    "put-role-policy",
    "attach-role-policy",
    "request-service-quota-increase",
    "kubectl drain",
    "kubectl cordon",
    "kubectl label",
    "kubectl delete",
    "kubectl set env",
    "kubectl create",
    "scontrol update",
    "systemctl restart",
    "systemctl start",
    "systemctl enable",
    "chronyc makestep",
    "sysctl -w",
    "journalctl --vacuum",
    "prune",
    "dos2unix",
    "dcgmi health -s",
    "dcgmi diag",
)

#: Copies, moves and deletions in S3; copying an object to standard output (``- |``) only reads.
S3_WRITE_RE = re.compile(r"\baws s3 (cp|mv|rm|sync)\b(?!\s+\S+\s+-(\s|$))")

#: Mutating commands that change cluster, VPC, security-group, subnet, EKS or IAM configuration:
#: their ``IaC note:`` must explain the drift and may never claim there is none.
CONFIG_MARKERS = (
    "authorize-security-group",
    "revoke-security-group",
    "modify-vpc-attribute",
    "modify-vpc-endpoint",
    "create-vpc-endpoint",
    "replace-route",
    "update-cluster ",
    "update-cluster-config",
    "kubectl label",
    "kubectl set env",
    "kubectl create namespace",
    "put-role-policy",
    "attach-role-policy",
)

#: Commands the runbook must never show at all (upstream mistakes we do not repeat).
FORBIDDEN_IN_CODE = ("modprobe", "pkill", "killall", "kill -9")

#: Inline code that starts like a shell command is checked for mutating markers too.
COMMAND_PREFIXES = ("aws ", "kubectl ", "sudo ", "scontrol ", "systemctl ", "chronyc ", "docker ", "crictl ")

SECTION_ID_RE = re.compile(r"^[A-O](\.[0-9]+(\.[a-z])?)?$")
LINK_RE = re.compile(r"\]\(#([^)\s]+)\)")
INLINE_CODE_RE = re.compile(r"`([^`]+)`")


# --------------------------------------------------------------------------- markdown helpers


def expected_level(section: str) -> int:
    return 2 + section.count(".")


def section_headings(headings: list[Heading]) -> dict[str, Heading]:
    """Headings whose first word looks like a section id, keyed by that id."""
    found: dict[str, Heading] = {}
    for heading in headings:
        first = heading.text.split(" ", 1)[0]
        if SECTION_ID_RE.match(first):
            if first in found:
                raise AssertionError(
                    f"section {first} has two headings (lines {found[first].line + 1}, {heading.line + 1})"
                )
            found[first] = heading
    return found


def heading_problems(markdown: str, sections: dict[str, str]) -> list[str]:
    headings, _, _ = scan(markdown)
    found = section_headings(headings)
    problems: list[str] = []
    for section, title in sections.items():
        heading = found.get(section)
        want = f"{section} {title}"
        if heading is None:
            problems.append(f"no heading for {section}: want {'#' * expected_level(section)} {want}")
            continue
        if heading.text != want:
            problems.append(f"heading for {section} reads {heading.text!r}, want {want!r}")
        if heading.level != expected_level(section):
            problems.append(f"heading for {section} has level {heading.level}, want {expected_level(section)}")
    for section in found:
        if section not in sections:
            problems.append(f"heading for unknown section id {section!r}")
    return problems


def mutating_hits(text: str) -> list[str]:
    """The state-changing commands named in ``text``."""
    hits = [marker.strip() for marker in MUTATING_MARKERS if marker in text]
    hits += [match.group(0) for match in S3_WRITE_RE.finditer(text)]
    return hits


@dataclass(frozen=True)
class SuggestedBlock:
    header_line: int
    fence: Fence
    notes: list[str]
    end_line: int  # last line of the condition bullets


def suggested_blocks(markdown: str) -> tuple[list[SuggestedBlock], list[str]]:
    """Every suggested-command block with the bullet lines after its fence, and format problems."""
    lines = markdown.split("\n")
    _, fences, outside = scan(markdown)
    fence_by_start = {fence.start: fence for fence in fences}
    blocks: list[SuggestedBlock] = []
    problems: list[str] = []
    for number in outside:
        if lines[number].strip() != SUGGESTED_HEADER:
            continue
        following = number + 1
        while following < len(lines) and not lines[following].strip():
            following += 1
        fence = fence_by_start.get(following)
        if fence is None or fence.lang != "bash":
            problems.append(f"line {number + 1}: suggested-command header not followed by a ```bash block")
            continue
        notes: list[str] = []
        cursor = fence.end + 1
        while cursor < len(lines) and not lines[cursor].strip():
            cursor += 1
        last = fence.end
        while cursor < len(lines) and lines[cursor].strip():
            text = lines[cursor]
            if text.startswith("- "):
                notes.append(text[2:].strip())
            elif text.startswith("  ") and notes:
                notes[-1] += " " + text.strip()
            else:
                break
            last = cursor
            cursor += 1
        blocks.append(SuggestedBlock(number, fence, notes, last))
    return blocks, problems


REQUIRED_NOTES = ("Preconditions", "Blast radius", "Reversible", "IaC note")

#: An IaC note that says the command causes no drift ("No drift: ...", "no template drift").
NO_DRIFT_RE = re.compile(r"\bno (template )?drift\b", re.IGNORECASE)


def iac_note_problems(where: str, body: str, notes: list[str]) -> list[str]:
    """Every block has one IaC note that talks about drift; configuration changes never deny it."""
    iac = [note.partition(":")[2].strip() for note in notes if note.partition(":")[0] == "IaC note"]
    if len(iac) > 1:
        return [f"{where} has {len(iac)} '- IaC note:' lines"]
    if not iac or not iac[0]:
        return []  # reported as missing or empty with the other condition lines
    problems: list[str] = []
    if "drift" not in iac[0].lower():
        problems.append(f"{where}: the IaC note does not say whether the command causes drift")
    if any(marker in body for marker in CONFIG_MARKERS) and NO_DRIFT_RE.search(iac[0]):
        problems.append(f"{where} changes configuration but its IaC note claims there is no drift")
    return problems


def block_problems(markdown: str) -> list[str]:
    blocks, problems = suggested_blocks(markdown)
    for block in blocks:
        where = f"suggested command on line {block.header_line + 1}"
        labels = [note.split(":", 1)[0] for note in block.notes]
        for required in REQUIRED_NOTES:
            if required not in labels:
                problems.append(f"{where} lacks a '- {required}:' line")
        for note in block.notes:
            label, _, value = note.partition(":")
            if label in REQUIRED_NOTES and not value.strip():
                problems.append(f"{where}: '{label}:' is empty")
        problems += iac_note_problems(where, block.fence.body, block.notes)
        if not mutating_hits(block.fence.body):
            problems.append(f"{where} shows no recognised state-changing command (extend MUTATING_MARKERS?)")
    return problems


def stray_mutations(markdown: str) -> list[str]:
    """Mutating commands shown anywhere except inside a suggested-command block."""
    blocks, _ = suggested_blocks(markdown)
    allowed = {block.fence.start for block in blocks}
    # The condition bullets belong to their block: undo commands in "Reversible:" are fine there.
    inside = {line for block in blocks for line in range(block.header_line, block.end_line + 1)}
    _, fences, outside = scan(markdown)
    problems: list[str] = []
    for fence in fences:
        if fence.start in allowed:
            continue
        for hit in mutating_hits(fence.body):
            problems.append(f"code block on line {fence.start + 1} shows {hit!r} outside a suggested block")
    lines = markdown.split("\n")
    prose = "\n".join(lines[number] for number in outside if number not in inside)
    for span in INLINE_CODE_RE.findall(prose):
        command = " ".join(span.split())
        if command.startswith(COMMAND_PREFIXES):
            for hit in mutating_hits(command + " "):
                problems.append(f"inline command `{command}` shows {hit!r} outside a suggested block")
    return problems


def forbidden_commands(markdown: str) -> list[str]:
    _, fences, _ = scan(markdown)
    return [
        f"code block on line {fence.start + 1} contains {word!r}"
        for fence in fences
        for word in FORBIDDEN_IN_CODE
        if word in fence.body
    ]


def dangling_links(markdown: str) -> list[str]:
    headings, _, outside = scan(markdown)
    slugs = {github_slug(heading.text) for heading in headings}
    lines = markdown.split("\n")
    prose = "\n".join(lines[number] for number in outside)
    return sorted({target for target in LINK_RE.findall(prose) if target not in slugs})


def contents_links(markdown: str) -> set[str]:
    """In-page link targets listed between the contents heading and the first section heading."""
    headings, _, outside = scan(markdown)
    contents = next((h for h in headings if h.text.lower() in ("contents", "table of contents")), None)
    if contents is None:
        return set()
    first_section = min((h.line for h in section_headings(headings).values()), default=len(markdown))
    lines = markdown.split("\n")
    text = "\n".join(lines[number] for number in outside if contents.line < number < first_section)
    return set(LINK_RE.findall(text))


def section_bodies(markdown: str) -> dict[str, str]:
    """Text from each section heading to the next section heading (of any depth)."""
    headings, _, _ = scan(markdown)
    found = sorted(section_headings(headings).items(), key=lambda item: item[1].line)
    lines = markdown.split("\n")
    ends = [heading.line for _, heading in found[1:]]
    trailing = [h.line for h in headings if h.level == 2 and h.line > found[-1][1].line] if found else []
    ends.append(trailing[0] if trailing else len(lines))
    return {section: "\n".join(lines[heading.line : end]) for (section, heading), end in zip(found, ends, strict=True)}


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def runbook() -> str:
    assert RUNBOOK.is_file(), f"{RUNBOOK_PATH} is missing"
    return RUNBOOK.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- the real runbook


def test_every_section_has_its_heading_at_the_right_level(runbook: str) -> None:
    assert heading_problems(runbook, SECTIONS) == []


@pytest.mark.parametrize("section", list(SECTIONS))
def test_anchor_matches_the_github_slug_of_the_heading(runbook: str, section: str) -> None:
    headings, _, _ = scan(runbook)
    heading = section_headings(headings)[section]
    assert anchor(section) == github_slug(heading.text)


def test_sections_appear_in_contract_order(runbook: str) -> None:
    headings, _, _ = scan(runbook)
    found = section_headings(headings)
    order = sorted(found, key=lambda section: found[section].line)
    assert order == list(SECTIONS)


def test_heading_anchors_are_unique(runbook: str) -> None:
    headings, _, _ = scan(runbook)
    slugs = [github_slug(heading.text) for heading in headings]
    duplicates = sorted({slug for slug in slugs if slugs.count(slug) > 1})
    assert duplicates == []


def test_contents_links_every_section(runbook: str) -> None:
    listed = contents_links(runbook)
    missing = [anchor(section) for section in SECTIONS if anchor(section) not in listed]
    assert missing == []
    assert "missing-iam-permissions" in listed


def test_every_in_page_link_resolves(runbook: str) -> None:
    assert dangling_links(runbook) == []


def test_missing_permissions_section_follows_the_letter_sections(runbook: str) -> None:
    headings, _, _ = scan(runbook)
    last_section_line = max(h.line for h in section_headings(headings).values())
    tail = [h for h in headings if h.level == 2 and h.line > last_section_line]
    assert [h.text for h in tail] == ["Missing IAM permissions"]
    body = runbook[runbook.index("## Missing IAM permissions") :]
    assert "Missing IAM permission <action>" in body
    assert "UNKNOWN" in body


def test_suggested_command_blocks_state_their_conditions(runbook: str) -> None:
    blocks, _ = suggested_blocks(runbook)
    assert len(blocks) >= 25, "the runbook lost most of its remediation blocks"
    assert block_problems(runbook) == []


def test_every_suggested_block_has_a_drift_note(runbook: str) -> None:
    blocks, _ = suggested_blocks(runbook)
    missing = [
        block.header_line + 1
        for block in blocks
        if not any(note.startswith("IaC note:") and note.partition(":")[2].strip() for note in block.notes)
    ]
    assert missing == [], f"suggested blocks without an IaC note on lines {missing}"
    node_level = [block for block in blocks if not any(marker in block.fence.body for marker in CONFIG_MARKERS)]
    assert len(node_level) >= 15, "expected many node-level blocks (reboot, replace, drain, restarts, clean-ups)"
    for block in node_level:
        if "batch-reboot-cluster-nodes" in block.fence.body or "batch-replace-cluster-nodes" in block.fence.body:
            note = next(note for note in block.notes if note.startswith("IaC note:"))
            assert NO_DRIFT_RE.search(note) and "lifecycle scripts" in note, note


def test_on_node_changes_point_to_the_lifecycle_scripts(runbook: str) -> None:
    """Settings that should outlive the node (huge pages, chrony) name the durable place for them."""
    blocks, _ = suggested_blocks(runbook)
    for command in ("sysctl -w vm.nr_hugepages", "systemctl restart chrony"):
        block = next(block for block in blocks if command in block.fence.body)
        note = next(note for note in block.notes if note.startswith("IaC note:"))
        assert "lifecycle scripts" in note and "AMI" in note, note


def test_mutating_commands_appear_only_in_suggested_blocks(runbook: str) -> None:
    assert stray_mutations(runbook) == []


def test_runbook_never_shows_forbidden_commands(runbook: str) -> None:
    assert forbidden_commands(runbook) == []


def test_batch_apis_are_shown_with_their_limits(runbook: str) -> None:
    blocks, _ = suggested_blocks(runbook)
    for api in ("batch-reboot-cluster-nodes", "batch-replace-cluster-nodes"):
        matching = [block for block in blocks if api in block.fence.body]
        assert matching, f"no suggested block for {api}"
        for block in matching:
            preconditions = next(note for note in block.notes if note.startswith("Preconditions"))
            assert "1 and 25" in preconditions
    replace = next(block for block in blocks if "batch-replace-cluster-nodes" in block.fence.body)
    text = " ".join(replace.notes)
    assert "controller" in text and "secondary volumes" in text


@pytest.mark.parametrize("section", list(SECTIONS))
def test_every_section_names_its_signals(runbook: str, section: str) -> None:
    assert "**Signals**" in section_bodies(runbook)[section]


@pytest.mark.parametrize("section", [s for s in SECTIONS if not any(o.startswith(s + ".") for o in SECTIONS)])
def test_every_leaf_section_has_read_only_diagnostics(runbook: str, section: str) -> None:
    body = section_bodies(runbook)[section]
    assert "**Read-only diagnostics**" in body
    _, fences, _ = scan(body)
    assert any(fence.lang == "bash" for fence in fences), f"§ {section} shows no diagnostic command"


def test_introduction_states_the_policy(runbook: str) -> None:
    intro = runbook[: runbook.index("## Contents")]
    for phrase in ("investigate → reboot → replace", "UNKNOWN is not FAIL", "read-only", "IaC note"):
        assert phrase in intro, phrase


def test_upstream_signal_strings_are_present(runbook: str) -> None:
    for signal in (
        "EFA health checks did not run successfully",
        "UnschedulablePendingReplacement",
        "UnschedulablePendingReboot",
        "Node unexpectedly rebooted",
        "enableDnsSupport",
        "L-DF5E4CA3",
        "We currently do not have sufficient capacity",
        "LifecycleConfig/<group>/<instance-id>",
        "SagemakerHealthMonitoringAgent/<group>/<instance-id>",
        "/aws/sagemaker/Clusters/<cluster-name>/<cluster-id>",
        "sagemaker-cluster:<cluster-id>_<group>-<instance-id>",
        "sagemaker.amazonaws.com/fault-details",
        "127.0.0.1:50051",
        "ThreadsPerCore",
    ):
        assert signal in runbook, signal


# --------------------------------------------------------------------------- the helpers can fail


GOOD_DOC = """# Title

## Contents

- [A EFA and security groups](#a-efa-and-security-groups)

## A EFA and security groups

**Signals**

**Read-only diagnostics**

```bash
# a comment that looks like a heading
aws ec2 describe-security-groups --group-ids <sg-id>
```

**Suggested command (run this yourself)**

```bash
aws ec2 authorize-security-group-ingress --group-id <sg-id>
```

- Preconditions: the rule is missing.
- Blast radius: members of the group.
- Reversible: yes, revoke it.
- IaC note: change the template and record any drift.
"""


def test_slug_examples() -> None:
    assert github_slug("G.1.a GPU memory row remapping") == "g1a-gpu-memory-row-remapping"
    assert github_slug("B.1 Subnets, security groups and addressing") == "b1-subnets-security-groups-and-addressing"
    assert github_slug("Missing IAM permissions") == "missing-iam-permissions"


def test_helpers_accept_a_well_formed_document() -> None:
    assert heading_problems(GOOD_DOC, {"A": "EFA and security groups"}) == []
    assert block_problems(GOOD_DOC) == []
    assert stray_mutations(GOOD_DOC) == []
    assert dangling_links(GOOD_DOC) == []
    assert contents_links(GOOD_DOC) == {"a-efa-and-security-groups"}


def test_comment_lines_inside_code_are_not_headings() -> None:
    headings, fences, _ = scan(GOOD_DOC)
    assert all("comment" not in heading.text for heading in headings)
    assert len(fences) == 2


def test_wrong_title_or_level_is_reported() -> None:
    renamed = GOOD_DOC.replace("## A EFA and security groups", "## A EFA and SGs")
    assert heading_problems(renamed, {"A": "EFA and security groups"})
    demoted = GOOD_DOC.replace("## A EFA and security groups", "### A EFA and security groups")
    assert heading_problems(demoted, {"A": "EFA and security groups"})
    assert heading_problems(GOOD_DOC, {"A": "EFA and security groups", "B": "VPC and routing"})


NODE_DOC = """## A EFA and security groups

**Suggested command (run this yourself)**

```bash
aws sagemaker batch-reboot-cluster-nodes --cluster-name c --node-ids i-0
```

- Preconditions: the fault looks transient.
- Blast radius: one node restarts.
- Reversible: not applicable.
- IaC note: no drift: a reboot changes no template-managed configuration.
"""


def test_missing_condition_lines_are_reported() -> None:
    assert block_problems(GOOD_DOC.replace("- Blast radius: members of the group.\n", ""))
    assert block_problems(GOOD_DOC.replace("- Preconditions: the rule is missing.\n", ""))
    assert block_problems(GOOD_DOC.replace("- IaC note: change the template and record any drift.\n", ""))
    assert block_problems(GOOD_DOC.replace("```bash\naws ec2 authorize", "```\naws ec2 authorize"))


def test_node_level_blocks_need_a_drift_note_too() -> None:
    assert block_problems(NODE_DOC) == []
    without = NODE_DOC.replace("- IaC note: no drift: a reboot changes no template-managed configuration.\n", "")
    assert any("IaC note" in problem for problem in block_problems(without))
    empty = NODE_DOC.replace("no drift: a reboot changes no template-managed configuration.", "")
    assert any("empty" in problem for problem in block_problems(empty))
    silent = NODE_DOC.replace("no drift: a reboot changes", "a reboot changes")
    assert any("drift" in problem for problem in block_problems(silent))
    twice = NODE_DOC + "- IaC note: no drift, again.\n"
    assert any("2 '- IaC note:' lines" in problem for problem in block_problems(twice))


def test_configuration_changes_cannot_claim_no_drift() -> None:
    denied = GOOD_DOC.replace(
        "- IaC note: change the template and record any drift.", "- IaC note: no drift: it is only a rule."
    )
    assert any("claims there is no drift" in problem for problem in block_problems(denied))


def test_mutation_outside_a_suggested_block_is_reported() -> None:
    in_diagnostics = GOOD_DOC.replace(
        "aws ec2 describe-security-groups --group-ids <sg-id>",
        "aws sagemaker batch-reboot-cluster-nodes --cluster-name c --node-ids i-0",
    )
    assert stray_mutations(in_diagnostics)
    inline = GOOD_DOC + "\nThen run `kubectl drain <node-name>` quickly.\n"
    assert stray_mutations(inline)
    header_removed = GOOD_DOC.replace(SUGGESTED_HEADER, "Run this:")
    assert stray_mutations(header_removed)


def test_s3_reads_are_not_mutations_but_uploads_are() -> None:
    assert mutating_hits("aws s3 cp s3://bucket/on_create.sh - | file -") == []
    assert mutating_hits("aws s3 ls s3://bucket/") == []
    assert mutating_hits("aws s3 cp on_create.sh s3://bucket/on_create.sh")
    assert mutating_hits("aws s3 rm s3://bucket/on_create.sh")


def test_undo_commands_in_condition_lines_belong_to_the_block() -> None:
    assert stray_mutations(GOOD_DOC.replace("yes, revoke it.", "yes, `aws ec2 revoke-security-group-ingress`.")) == []


def test_forbidden_and_dangling_are_reported() -> None:
    assert forbidden_commands(GOOD_DOC.replace("aws ec2 describe", "sudo modprobe neuron; aws ec2 describe"))
    assert dangling_links(GOOD_DOC + "\nSee [§ Z](#z-nowhere).\n") == ["z-nowhere"]
