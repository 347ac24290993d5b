"""``python -m devenv.processnode``: run one process node until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from devenv.processnode.images import ImageMap, ImagePullError
from devenv.processnode.node import NodeConfig, ProcessNode


def parse_args(argv: list[str] | None) -> NodeConfig:
    parser = argparse.ArgumentParser(
        prog="python -m devenv.processnode",
        description="Register a Node and run the pods bound to it as local processes.",
    )
    parser.add_argument("--kubeconfig", type=Path, required=True, help="admin kubeconfig")
    parser.add_argument("--name", default="node-1", help="Node name (default: node-1)")
    parser.add_argument("--state-dir", type=Path, help="pods, logs (default: ./<name>)")
    parser.add_argument(
        "--pod-cidr",
        default="127.1.0.0/16",
        help="pod IPs, inside 127.0.0.0/8 (default: %(default)s)",
    )
    parser.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="extra Node label"
    )
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="REPOSITORY=LIKE",
        help="run image repository REPOSITORY the way LIKE runs, e.g. myjob=pgsched "
        "(built-in: pgsched → the checkout's venv; busybox, alpine, debian, ubuntu, bash, "
        "python → the host's tools)",
    )
    args = parser.parse_args(argv)
    images = ImageMap.default(
        venv_bin=Path(sys.prefix) / "bin", python_bin=Path(sys.base_prefix) / "bin"
    )
    for mapping in args.image:
        repository, _, like = mapping.partition("=")
        try:
            images = images.with_alias(repository, like=like)
        except ImagePullError:
            parser.error(f"--image {mapping}: LIKE must be a mapped repository, e.g. pgsched")
    return NodeConfig(
        name=args.name,
        kubeconfig=args.kubeconfig,
        state_dir=(args.state_dir or Path(args.name)).resolve(),
        images=images,
        pod_cidr=args.pod_cidr,
        labels=dict(label.split("=", 1) for label in args.label),
    )


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(threadName)s %(levelname)s %(message)s"
    )
    node = ProcessNode(parse_args(argv))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        node.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    node.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
