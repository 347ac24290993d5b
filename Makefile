# pgsched developer entry points. Every target bootstraps what it needs:
# a fresh machine only needs python3, go and Debian's postgresql-15.
#
#   make demo   local control plane + Postgres + helm install + example ScheduledJobs
#   make test   lint, type-check, the docs site and the whole test suite (what CI runs)
#   make docs   the documentation site (MkDocs, strict) into .cache/site
#   make bench  the benchmarks in bench/ (not part of the test run)
#   make chaos  the chaos suite alone, CI length (it also runs inside `make test`)
#   make chaos-long MINUTES=10   the chaos variants for MINUTES each (docs/chaos.md)
#   make fuzz   the schedule/spec/CLI fuzzing with the long hypothesis profile (20x CI)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: venv k8s kueue images docs lint test test-unit test-db test-cluster chaos chaos-long demo bench clean fuzz

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $@

# Kubernetes control-plane and helm binaries, built from the official Go modules into
# .cache/k8s/<version>/bin (built once per machine, then reused).
k8s:
	hack/k8s/build.sh

# Kueue's controller manager, built from its Go module with its CRDs and webhook manifests
# into .cache/kueue/<version> (once per machine): the admission-queue tests run the real one.
kueue:
	hack/kueue/build.sh

# The images the local node runs (pause, busybox, a Python base, pgsched from the root
# Dockerfile), built from Debian and this checkout into .cache/images (docs/local-cluster.md).
images:
	hack/images/build.sh

lint: venv
	$(BIN)/ruff check operator devenv tests bench examples hack
	$(BIN)/ruff format --check operator devenv tests bench examples hack
	$(BIN)/mypy
	PYTHONPATH=operator:. $(BIN)/lint-imports
	$(MAKE) --no-print-directory docs

# The documentation site (mkdocs.yml) into .cache/site; --strict: a broken link or anchor,
# or a page missing from the navigation, fails the build.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The test command the README documents and CI runs. Cluster tests must not be skipped
# here: missing control-plane binaries are an error, not a reason to test less.
# hack/test.sh runs the tests that need the node and the others as two pytest processes at
# once (the first mostly wait, the others mostly compute); ARGS go to both.
test: venv k8s kueue images lint
	hack/debian-deps.sh --test
	hack/test.sh $(ARGS)

test-unit: venv
	$(BIN)/pytest tests/unit

fuzz: venv
	PGSCHED_FUZZ=long $(BIN)/pytest tests/unit/test_schedule_fuzz.py --hypothesis-show-statistics

test-db: venv
	$(BIN)/pytest tests/unit tests/db

test-cluster: venv k8s kueue images
	PGSCHED_REQUIRE_CLUSTER=1 $(BIN)/pytest -m cluster

# Chaos (docs/chaos.md). Reports: .cache/chaos/*.json. PGSCHED_CHAOS_SEED=<seed> replays.
# VARIANTS=db, cluster or cluster_failover runs one variant of chaos-long only.
MINUTES  ?= 10
VARIANTS ?= db cluster cluster_failover

chaos: venv k8s images
	PGSCHED_REQUIRE_CLUSTER=1 $(BIN)/pytest -s tests/chaos

chaos-long: venv k8s images
	PGSCHED_REQUIRE_CLUSTER=1 PGSCHED_CHAOS_MINUTES=$(MINUTES) \
		$(BIN)/pytest -s $(foreach v,$(VARIANTS),tests/chaos/test_chaos_$(v).py)

demo: venv k8s images
	$(BIN)/python -m devenv.demo

bench: venv
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
