"""The Slurm jobs command and its answer (issue 33): a job picked out of what the controller holds, or of
accounting. Expected values are read off the fixture's lines (tests/fixtures/slurm/*.meta.md)."""

from __future__ import annotations

import pathlib
import subprocess
from datetime import UTC, datetime

from hyperpod_debugger.slurm.jobs import JOB_ID, find_job, jobs_command, parse_jobs_output, parse_oneliner

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "jobs-man-page-and-accounting.txt"


def test_the_man_page_job_reads_as_it_is_printed():
    job = find_job(parse_jobs_output(FIXTURE.read_text()), "71701")
    assert job is not None
    assert (job.job_id, job.name, job.owner, job.state, job.exit_code) == (
        "71701",
        "hostname",
        "da",
        "COMPLETED",
        "0:0",
    )
    assert job.start == job.end == datetime(2010, 1, 5, 10, 58, 40, tzinfo=UTC)
    assert [n.name for n in job.nodes] == ["snowflake0"] and job.reason is None and not job.failed


def test_a_live_job_on_a_node_range_holds_every_node():
    job = find_job(parse_jobs_output(FIXTURE.read_text()), "5412936")
    assert job is not None and [n.name for n in job.nodes] == ["nia0012", "nia0013"]
    assert job.state == "COMPLETING" and not job.ended


def test_an_accounting_row_keeps_a_name_with_a_bar_and_reads_node_fail():
    job = find_job(parse_jobs_output(FIXTURE.read_text()), "4123")
    assert job is not None
    assert job.name == "llama 70b | pretrain" and job.owner == "alice"
    assert [n.name for n in job.nodes] == ["ip-10-1-2-11", "ip-10-1-2-12", "ip-10-1-2-13", "ip-10-1-2-14"]
    assert job.failed and job.node_ended_it and job.ended
    assert job.end == datetime(2026, 11, 30, 3, 12, tzinfo=UTC)


def test_a_cancelled_array_task_reads_with_its_own_id():
    job = find_job(parse_jobs_output(FIXTURE.read_text()), "4124_3")
    assert job is not None and job.state == "CANCELLED by 1000" and job.failed and not job.node_ended_it


def test_a_job_neither_section_holds_is_none_and_errors_are_kept():
    read = parse_jobs_output(
        "==HPD:jobs_live==\nNo jobs in the system\n==HPD:jobs_history==\n"
        "sacct: error: Slurm accounting storage is disabled\n"
    )
    assert find_job(read, "4123") is None
    assert read.errors == {"jobs_history": "sacct: error: Slurm accounting storage is disabled"}
    assert parse_jobs_output("login banner only").errors.keys() == {"jobs_live", "jobs_history"}


def test_oneliner_values_may_hold_spaces_and_equals_signs():
    fields = parse_oneliner("JobId=7 JobName=train llama 70b TRES=cpu=96,mem=1T,node=1 NodeList=ip-10-1-2-3")
    assert fields == {
        "JobId": "7",
        "JobName": "train llama 70b",
        "TRES": "cpu=96,mem=1T,node=1",
        "NodeList": "ip-10-1-2-3",
    }


def test_job_ids_people_type_are_accepted_and_nothing_else():
    assert all(JOB_ID.match(i) for i in ("4123", "4123_7", "4123+1"))
    assert not any(JOB_ID.match(i) for i in ("4123;reboot", "", "41 23", "$(id)", "4123_"))


def test_the_command_is_one_bash_argument_bash_can_parse_and_reads_only():
    command = jobs_command()
    assert command.startswith("bash -c '") and command.count("'") == 2
    script = command[len("bash -c '") : -1]
    assert subprocess.run(["bash", "-n", "-c", script], check=False).returncode == 0  # noqa: S603,S607
    for verb in ("scontrol show job", "sacct --allusers"):
        assert verb in script
    for writer in ("scontrol update", "scancel", "scontrol requeue", "sbatch", "srun", ">"):
        assert writer not in script.replace("2>&1", "")
