"""``pgsched run``: the container command of a pod that runs an SDK job kind."""

from __future__ import annotations

import argparse
import os

from pgsched.cli.common import CommandError
from pgsched.runner import sdk_runner, settings
from pgsched.runner.exit_codes import ExitCode
from pgsched.validation import SettingsError

_VARIABLES = settings.RUNNER_VARIABLES


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Import the job modules, run the job kind with its arguments while"
        " heartbeating, and record the outcome. The operator sets every option through"
        " PGSCHED_* environment variables; flags override them. Exit codes: 0 completed,"
        " 1 failed, 2 bad configuration, 3 cancelled, 4 lease lost, 143 stopped by SIGTERM."
        " See docs/sdk.md."
    )
    settings.add_flags(parser, _VARIABLES)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        contract = settings.from_environment(
            os.environ, overrides=settings.flag_values(args, _VARIABLES), job=True
        )
    except SettingsError as error:
        raise CommandError(
            f"cannot start the run, the pod's configuration is incomplete:\n{error}",
            code=ExitCode.CONFIGURATION,
        ) from None
    return int(sdk_runner.run(contract))
