# The pgsched image: one image for the operator (`pgsched operator`), the schema migration
# (`pgsched migrate`), the heartbeat sidecar (`pgsched heartbeat`) and the job SDK runner
# (`pgsched run`).
#
#   docker build -t ghcr.io/pgsched/pgsched:0.1.0 .
#
# The builder turns the checkout into wheels (pgsched and every dependency) and installs them,
# offline, into a virtualenv without pip. The final stage is the same slim Python base plus
# that virtualenv: no compiler, no pip, no pip cache, no source tree. It runs as the numeric
# non-root user 10001 (the UID the Job builder gives the heartbeat sidecar) and never writes
# to its root filesystem: bytecode is compiled at build time, HOME and TMPDIR are /tmp, which
# the Helm chart mounts as an emptyDir next to `readOnlyRootFilesystem: true`.
#
# tests/unit/test_dockerfile.py lints this file with hadolint and runs the builder stage's
# ENV, WORKDIR, COPY and RUN steps on the host, then the installed entry points; keep the
# builder's install steps in RUN instructions (not in scripts) so that test sees them.

# Both stages must use the same base: the virtualenv's python is a symlink into it.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    WHEELS=/wheels \
    VENV=/opt/pgsched/venv

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/

# pgsched and all its dependencies as wheels (every dependency ships manylinux wheels, so
# no compiler is needed), then an offline install from exactly those wheels.
RUN pip wheel --wheel-dir "$WHEELS" .
RUN python -m venv --without-pip "$VENV" \
    && pip --python "$VENV/bin/python" install --no-index --find-links "$WHEELS" "$WHEELS"/pgsched-*.whl \
    && "$VENV/bin/pgsched" --version


FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="pgsched" \
      org.opencontainers.image.description="Cron, RRULE and one-shot jobs on Kubernetes, scheduled through Postgres" \
      org.opencontainers.image.source="https://github.com/pgsched/pgsched" \
      org.opencontainers.image.licenses="Apache-2.0"

# The base image's own pip, setuptools and wheel are build tools the running image never
# needs. The passwd entry lets libpq and getpass resolve UID 10001 to a name.
RUN python -m pip uninstall --yes --root-user-action=ignore pip setuptools wheel \
    && rm -rf /root/.cache \
    && groupadd --gid 10001 pgsched \
    && useradd --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
        --shell /usr/sbin/nologin pgsched

COPY --from=builder /opt/pgsched/venv /opt/pgsched/venv
# The SDK examples (docs/sdk.md), importable with `workingDir: /opt/pgsched/examples`; not
# on sys.path otherwise.
COPY examples/pgsched_examples/ /opt/pgsched/examples/pgsched_examples/

ENV PATH=/opt/pgsched/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp

USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["pgsched"]
CMD ["--help"]
