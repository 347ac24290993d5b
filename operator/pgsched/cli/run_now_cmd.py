"""``pgsched run-now <sj>``: queue a manual run now, once per idempotency token.

It calls the engine's ``runs.run_now`` directly: the run row exists when the command
returns, and it is claimed by the operator's next tick through the same dispatch path as
every scheduled run (caps, leases). It behaves like the ``pgsched.dev/run-now`` annotation:
one run per distinct token, a repeated token returns the run it queued before. Tokens are
kept apart by source (``cli:<token>`` here, ``annotation:<token>`` for the annotation), so
a CLI token never collides with an annotation value left on the resource.
"""

from __future__ import annotations

import argparse
import uuid

from pgsched.cli import common, output, runs_cmd, target
from pgsched.engine import runs

TOKEN_PREFIX = "cli:"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Queue one manual run of a ScheduledJob. With --token, repeating the"
        " command (a retried deploy step, say) queues nothing new and prints the run the"
        " token queued before. Without it a fresh token is generated."
    )
    target.add_flags(parser)
    common.add_dsn(parser)
    output.add_flag(parser)
    parser.add_argument(
        "--token",
        type=_token,
        help="idempotency token, e.g. deploy-1234 (default: a new random token)",
    )
    parser.set_defaults(handler=run)


def _token(text: str) -> str:
    if not text.strip() or len(text) > 200:
        raise argparse.ArgumentTypeError(
            "a token must be 1 to 200 characters, e.g. --token deploy-1234"
        )
    return text


def run(args: argparse.Namespace) -> int:
    token = args.token or uuid.uuid4().hex
    with common.connect(args, application_name="pgsched-cli") as conn:
        definition = target.definition(conn, args)
        try:
            enqueued = runs.run_now(conn, definition.id, token=TOKEN_PREFIX + token)
        except runs.UnknownDefinition:
            raise common.CommandError(
                f"{definition.key} was deleted while the run was being queued"
            ) from None
    if args.output == "json":
        output.emit_json(
            {
                "scheduledJob": definition.key,
                "token": token,
                "created": enqueued.created,
                "run": runs_cmd.summary(enqueued.run),
            }
        )
        return 0
    item = enqueued.run
    if enqueued.created:
        print(f"run {item.id} of {definition.key} queued (token {token})")
    else:
        print(
            f"token {token} was used before: run {item.id} of {definition.key}"
            f" ({item.status}); nothing new queued"
        )
    return 0
