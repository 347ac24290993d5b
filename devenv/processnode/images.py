"""Mapping container images onto something this machine can run.

There are no images here, only the host's tools and the checkout's venv. A rule matches the
last path component of the image's repository (``ghcr.io/pgsched/pgsched:0.1.0`` and
``pgsched:dev`` both match ``pgsched``) and says what PATH the container sees and what its
ENTRYPOINT/CMD would have been. An image no rule matches fails the container the way a real
node fails on an image it cannot pull: waiting reason ``ErrImagePull``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# A container's PATH in the common base images.
STANDARD_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


class ImagePullError(Exception):
    """No rule maps this image; the message is what the container status shows."""


@dataclass(frozen=True)
class ImageRule:
    """How to run one image repository: PATH entries before the standard ones, and the
    image's default ENTRYPOINT and CMD (used when the container gives no command/args)."""

    repository: str
    path: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()

    def argv(self, command: list[str], args: list[str]) -> list[str]:
        """Kubernetes' rule: ``command`` replaces ENTRYPOINT, ``args`` replaces CMD."""
        if command:
            return [*command, *args]
        return [*self.entrypoint, *(args or self.cmd)]

    def search_path(self) -> str:
        return ":".join([*self.path, *STANDARD_PATH])


@dataclass(frozen=True)
class ImageMap:
    rules: tuple[ImageRule, ...] = field(default_factory=tuple)

    @classmethod
    def default(cls, *, venv_bin: Path, python_bin: Path) -> ImageMap:
        """pgsched runs the checkout's venv (``pgsched`` is the checkout's entry point);
        common base images run the host's tools; ``python`` gets the venv's base interpreter
        (so ``python`` exists, but not the venv's packages)."""
        return cls(
            (
                ImageRule("pgsched", path=(str(venv_bin),), entrypoint=("pgsched",)),
                ImageRule("busybox", cmd=("sh",)),
                ImageRule("alpine", cmd=("/bin/sh",)),
                ImageRule("debian", cmd=("bash",)),
                ImageRule("ubuntu", cmd=("/bin/bash",)),
                ImageRule("bash", entrypoint=("bash",)),
                ImageRule("python", path=(str(python_bin),), cmd=("python3",)),
            )
        )

    def with_rule(self, rule: ImageRule) -> ImageMap:
        """A copy in which ``rule`` replaces any rule for the same repository."""
        kept = tuple(r for r in self.rules if r.repository != rule.repository)
        return ImageMap((rule, *kept))

    def with_alias(self, repository: str, *, like: str) -> ImageMap:
        """Run ``repository`` the way ``like`` runs (e.g. a user's job image like pgsched)."""
        template = self.resolve(like)
        return self.with_rule(
            ImageRule(repository, template.path, template.entrypoint, template.cmd)
        )

    def resolve(self, image: str) -> ImageRule:
        name = repository_name(image)
        for rule in self.rules:
            if rule.repository == name:
                return rule
        known = ", ".join(sorted(r.repository for r in self.rules))
        raise ImagePullError(
            f'Failed to pull image "{image}": the process node cannot run image repository '
            f'"{name}" (it maps only: {known}; add a rule with --image)'
        )


def repository_name(image: str) -> str:
    """``ghcr.io:443/pgsched/pgsched:0.1@sha256:…`` → ``pgsched``."""
    without_digest = image.split("@", 1)[0]
    last = without_digest.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]
