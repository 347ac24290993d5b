"""``pgsched runs`` through the Run API shows what it shows from the database: a Run object
read back is the run, to the second."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from pgsched.cli import runs_cmd, runs_remote
from pgsched.k8s.runs_api import resources
from unit.test_runs_api_watch import NOW, completed_run


def test_a_run_read_back_from_its_object_is_the_run():
    stored = completed_run(41)
    run = dataclasses.replace(
        stored.run,
        status="FAILED",
        reason="NonZeroExit",
        exit_code=3,
        retry_of=40,
        attempt=2,
        started_at=NOW,
        finished_at=NOW + timedelta(seconds=4.25),
        cancelled_by="RunAPI (alice)",
        parameters={"region": "eu"},
    )
    back = runs_remote.run_from_object(resources.run_object(dataclasses.replace(stored, run=run)))
    shown = ("id", "status", "reason", "attempt", "trigger", "retry_of", "exit_code",
             "cancelled_by", "k8s_job_name", "parameters", "definition_id", "scheduled_for")  # fmt: skip
    assert {key: getattr(back, key) for key in shown} == {key: getattr(run, key) for key in shown}
    assert runs_cmd.duration_of(back) == runs_cmd.duration_of(run)  # not rounded to seconds
    assert runs_cmd.reason_of(back) == runs_cmd.reason_of(run)


def test_without_a_database_or_a_kubeconfig_the_cli_names_both_ways(monkeypatch, tmp_path):
    import argparse

    from pgsched.cli.common import CommandError

    for variable in ("PGSCHED_DSN", "PGSCHED_DSN_FILE", "KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    args = argparse.Namespace(dsn=None, kubeconfig=None)
    with pytest.raises(CommandError) as refused:
        runs_remote.through_api(args, to="to read the runs through the Run API")
    assert refused.value.code == 2
    assert "pass --dsn (or set PGSCHED_DSN), or a kubeconfig" in str(refused.value)
    args.kubeconfig = str(tmp_path / "config")
    assert runs_remote.through_api(args, to="...") is True
    args.dsn = "host=db"
    assert runs_remote.through_api(args, to="...") is False
