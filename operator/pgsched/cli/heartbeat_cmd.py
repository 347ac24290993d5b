"""``pgsched heartbeat``: the heartbeat sidecar the operator injects next to job containers."""

from __future__ import annotations

import argparse
import os
import signal
import threading

from pgsched.cli.common import CommandError
from pgsched.runner import settings, sidecar
from pgsched.runner.exit_codes import ExitCode
from pgsched.validation import SettingsError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Heartbeat the run until SIGTERM, then exit 0. When the run is cancelled"
        " or its lease is lost, write the cancel file for the workload to poll. Never records"
        " a terminal status: the operator derives the outcome from the Job. See docs/sdk.md."
    )
    settings.add_flags(parser, settings.SIDECAR_VARIABLES)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        contract = settings.from_environment(
            os.environ, overrides=settings.flag_values(args, settings.SIDECAR_VARIABLES), job=False
        )
    except SettingsError as error:
        raise CommandError(
            f"cannot start the heartbeat, the pod's configuration is incomplete:\n{error}",
            code=ExitCode.CONFIGURATION,
        ) from None
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    sidecar.announce_listening(contract)  # only now may kubelet start the workload
    return sidecar.run(contract, stop)
