"""The Helm chart as rendered by the real helm binary (built by `make k8s`): lint, schema,
documentation, the CRD copy, RBAC shape, settings the operator accepts, rollout checksums.

What the rendered objects do on a real API server is in tests/cluster/test_chart_install.py
and tests/cluster/test_rbac_operator.py.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import pgsched
from devenv.binaries import bin_dir
from k8sfixtures import run_api_cert_dir
from pgsched.k8s.serve.settings import OperatorSettings, RunsApiSettings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pgsched"
CRDS = ROOT / "crds"
CHART_CRDS = CHART / "files" / "crds"
# Where `pgsched operator` reads its environment: the settings and the log level.
SETTINGS_SOURCES = [
    ROOT / "operator" / "pgsched" / path
    for path in ("k8s/serve/settings.py", "cli/main.py", "db/dsn.py")
]

Obj = dict[str, Any]

# The chart serves no namespace unless told which (jobs never run in the release namespace
# by default): every render below watches this one unless it says otherwise.
WATCHED = "watchNamespaces={jobs}"
# Where the Deployment mounts the run API's TLS Secret, whose ca.crt the settings read.
RUN_API_MOUNT = "/etc/pgsched/run-api"
# Where it mounts the Run API's (runsApi.enabled): the operator reads tls.crt and tls.key.
RUNS_API_MOUNT = "/etc/pgsched/runs-api"


@pytest.fixture(scope="module")
def helm_binary() -> Path:
    path = bin_dir() / "helm"
    if not path.is_file():
        message = f"helm not built at {path}: run `make k8s`"
        if os.environ.get("PGSCHED_REQUIRE_CLUSTER"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def helm(binary: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *map(str, args)], capture_output=True, text=True, timeout=60
    )


def render(
    binary: Path,
    *,
    values: Obj | None = None,
    sets: tuple[str, ...] = (),
    namespace: str = "pgsched-system",
    tmp: Path | None = None,
) -> list[Obj]:
    args: list[str | Path] = ["template", "pgsched", CHART, "-n", namespace]
    if "watchNamespaces" not in (values or {}):
        args += ["--set", WATCHED]  # --set outranks -f: only where values do not say
    if values is not None:
        assert tmp is not None
        values_file = tmp / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        args += ["-f", values_file]
    for item in sets:
        args += ["--set", item]
    result = helm(binary, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] == kind]


def deployment(objects: list[Obj]) -> Obj:
    [found] = of_kind(objects, "Deployment")
    return found


def container(objects: list[Obj], name: str = "operator") -> Obj:
    spec = deployment(objects)["spec"]["template"]["spec"]
    [found] = [c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == name]
    return found


# -- lint and schema ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        (),  # no values at all: the namespaces labelled pgsched.dev/serve=true
        (WATCHED,),
        (
            "database.dsn=host=db user=pgsched",
            "watchNamespaces={a,b}",
            "metrics.serviceMonitor.enabled=true",
            "image.digest=sha256:" + "0" * 64,
            "runApi.url=https://10.96.0.77",
            "runApi.certManager.enabled=true",
            "admissionWebhook.certManager.enabled=true",
            "runsApi.enabled=true",
            "runsApi.certManager.enabled=true",
        ),
        (
            "rbac.clusterWide=true",
            "crds.install=false",
            "podAntiAffinity=hard",
            "runsApi.enabled=true",
        ),
        (
            "watchNamespaces={pgsched-system,jobs}",
            "allowReleaseNamespace=true",
            "admissionPolicies.enabled=false",
            "networkPolicy.enabled=false",
            "jobTemplatePolicy.serviceAccounts={default,reports}",
        ),
    ],
    ids=["no-values", "a-list", "everything-on", "cluster-wide", "everything-off"],
)
def test_chart_passes_helm_lint_strict(helm_binary, sets):
    args = [arg for item in sets for arg in ("--set", item)]
    result = helm(helm_binary, "lint", "--strict", CHART, "--namespace", "pgsched-system", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


def test_schema_accepts_a_known_key_and_rejects_a_misspelled_one_by_name(helm_binary):
    assert deployment(render(helm_binary, sets=("replicaCount=3",)))["spec"]["replicas"] == 3

    top = helm(helm_binary, "template", "pgsched", CHART, "--set", "replicaCont=3")
    nested = helm(helm_binary, "template", "pgsched", CHART, "--set", "image.pullpolicy=Always")

    assert top.returncode != 0 and nested.returncode != 0
    assert "at '': additional properties 'replicaCont' not allowed" in top.stderr
    assert "at '/image': additional properties 'pullpolicy' not allowed" in nested.stderr


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("replicaCount=two", "at '/replicaCount': got string, want integer"),
        ("config.logLevel=debug", "at '/config/logLevel': value must be one of"),
        ("config.tickIntervalSeconds=often", "'often' does not match pattern"),
        ("podAntiAffinity=sometimes", "at '/podAntiAffinity': value must be one of"),
        ("image.digest=latest", "at '/image/digest': 'latest' does not match pattern"),
        ("health.port=70000", "at '/health/port': maximum: got 70,000, want 65,535"),
        ("runsApi.enabled=yes", "at '/runsApi/enabled': got string, want boolean"),
        ("runsApi.accessTtlSeconds=-1", "at '/runsApi/accessTtlSeconds': minimum: got -1"),
        (
            "notifications.allowDestinations={http://hooks}",
            "at '/notifications/allowDestinations/0': 'http://hooks' does not match pattern",
        ),
        (
            "namespaceLabels=pgsched.dev/serve",  # a key without a value
            "at '/namespaceLabels': 'pgsched.dev/serve' does not match pattern",
        ),
    ],
)
def test_schema_rejects_wrong_types_and_values_with_the_path(helm_binary, setting, message):
    result = helm(helm_binary, "template", "pgsched", CHART, "--set", setting)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


# -- documentation -----------------------------------------------------------------------------


def values_entries() -> list[tuple[str, str]]:
    """(dotted key, the comment block right above it) for every key in values.yaml."""
    entries, comment, stack = [], [], []
    for line in (CHART / "values.yaml").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
            continue
        if not stripped:
            comment = []
            continue
        match = re.match(r"^(\s*)([A-Za-z][\w.-]*):", line)
        if match:
            stack = [*stack[: len(match.group(1)) // 2], match.group(2)]
            entries.append((".".join(stack), " ".join(comment)))
        comment = []
    return entries


def documented_values() -> dict[str, str]:
    """Values documented as a whole: a commented key none of whose children is commented."""
    commented = {key: text for key, text in values_entries() if text}
    return {
        key: text
        for key, text in commented.items()
        if not any(other.startswith(key + ".") for other in commented)
    }


def default_of(key: str) -> Any:
    node: Any = yaml.safe_load((CHART / "values.yaml").read_text())
    for part in key.split("."):
        node = node[part]
    return node


def test_every_value_in_values_yaml_has_a_comment_or_a_documented_parent():
    documented = documented_values()
    undocumented = [
        key
        for key, text in values_entries()
        if not text
        and key not in documented
        and not any(key.startswith(whole + ".") for whole in documented)
        and not any(other.startswith(key + ".") for other in documented)
    ]
    assert undocumented == []


def test_chart_readme_lists_every_value_with_its_default():
    readme = (CHART / "README.md").read_text().split("\n## Values\n", 1)[1]
    rows = dict(re.findall(r"^\| `([\w.]+)` \| `(.*?)` \|", readme, re.M))
    expected = {key: json.dumps(default_of(key)) for key in documented_values()}
    table = "\n".join(
        f"| `{key}` | `{default}` | {documented_values()[key]} |"
        for key, default in expected.items()
    )
    assert rows == expected, f"update the values table in charts/pgsched/README.md:\n{table}"


def schema_properties(node: Obj, prefix: str = "") -> Iterator[tuple[str, Obj]]:
    for name, child in (node.get("properties") or {}).items():
        yield prefix + name, child
        yield from schema_properties(child, prefix + name + ".")


def test_every_schema_property_is_described_and_is_a_value():
    schema = json.loads((CHART / "values.schema.json").read_text())
    keys = {key for key, _ in values_entries()}
    properties = dict(schema_properties(schema))
    undescribed = [key for key, node in properties.items() if not node.get("description")]
    wholes = documented_values()  # their fields are those of a Kubernetes object
    missing = sorted(
        key
        for key in set(properties) - keys - {"global"}
        if not any(key.startswith(whole + ".") for whole in wholes)
    )
    assert undescribed == [] and missing == []
    assert schema["additionalProperties"] is False


# -- the CRD -----------------------------------------------------------------------------------


def test_chart_crds_are_the_repository_crds_byte_for_byte():
    names = sorted(path.name for path in CRDS.glob("*.yaml"))
    assert names == [
        "calendars.pgsched.dev.yaml",
        "concurrencypools.pgsched.dev.yaml",
        "notificationpolicies.pgsched.dev.yaml",
        "scheduledjobs.pgsched.dev.yaml",
    ]
    assert sorted(path.name for path in CHART_CRDS.glob("*.yaml")) == names
    for name in names:
        assert (CHART_CRDS / name).read_bytes() == (CRDS / name).read_bytes(), (
            "charts/pgsched/files/crds/ drifted from crds/; regenerate it with:\n"
            "  cp crds/*.yaml charts/pgsched/files/crds/"
        )


def test_rendered_crds_are_the_repository_crds_plus_labels_and_the_keep_policy(helm_binary):
    originals = {
        crd["metadata"]["name"]: crd
        for crd in (yaml.safe_load(path.read_text()) for path in CRDS.glob("*.yaml"))
    }

    kept = of_kind(render(helm_binary), "CustomResourceDefinition")
    unkept = of_kind(render(helm_binary, sets=("crds.keep=false",)), "CustomResourceDefinition")
    without = of_kind(render(helm_binary, sets=("crds.install=false",)), "CustomResourceDefinition")

    assert sorted(crd["metadata"]["name"] for crd in kept) == sorted(originals)
    for crd in kept:
        original = originals[crd["metadata"]["name"]]
        assert crd["spec"] == original["spec"]
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert original["metadata"]["labels"].items() <= crd["metadata"]["labels"].items()
    assert len(unkept) == len(originals)
    assert all("annotations" not in crd["metadata"] for crd in unkept)
    assert without == []


def test_app_version_and_chart_version_are_the_package_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == chart["version"] == pgsched.__version__


# -- what the operator gets ------------------------------------------------------------------


def operator_environment(objects: list[Obj], pod_ip: str = "10.1.2.3") -> dict[str, str]:
    """The operator container's environment as the kubelet would build it (Secrets aside)."""
    [config] = of_kind(objects, "ConfigMap")
    env = dict(config["data"])
    for item in container(objects)["env"]:
        if "value" in item:
            env[item["name"]] = item["value"].replace("$(POD_IP)", pod_ip)
        elif item["name"] == "POD_IP":
            env["POD_IP"] = pod_ip
    return env


@pytest.fixture(scope="module")
def run_api_mount(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for the mounted run API Secret: the settings read its ca.crt."""
    return run_api_cert_dir(tmp_path_factory.mktemp("run-api"))


def read_settings(env: dict[str, str], run_api_mount: Path) -> OperatorSettings:
    """What the operator makes of the rendered environment, its files where the kubelet
    would mount them (the connection string aside: a Secret the chart may not make)."""
    assert env["PGSCHED_RUN_API_CERT_DIR"] == RUN_API_MOUNT
    return OperatorSettings.from_environment(
        {**env, "PGSCHED_DSN": "from the Secret", "PGSCHED_RUN_API_CERT_DIR": str(run_api_mount)}
    )


def test_the_operator_accepts_the_rendered_settings(helm_binary, tmp_path, run_api_mount):
    values = {
        "watchNamespaces": ["jobs", "reports"],
        "image": {"tag": "1.2.3", "pullPolicy": "Always"},
        "config": {"tickIntervalSeconds": 0.5, "dispatchBatch": 20, "apiQps": 7.5},
        "runApi": {"namespaceRate": 2.5, "poolSize": 6},
        "runsApi": {"enabled": True, "poolSize": 3, "accessTtlSeconds": 2.5},
        "notifications": {"allowDestinations": ["10.0.0.0/8", ".tools.svc.cluster.local"]},
    }
    env = operator_environment(render(helm_binary, values=values, tmp=tmp_path))

    settings = read_settings(env, run_api_mount)

    assert settings.namespaces == ("jobs", "reports") and not settings.all_namespaces
    assert settings.jobs.image == "ghcr.io/pgsched/pgsched:1.2.3"
    assert settings.jobs.image_pull_policy == "Always"
    assert (settings.tick.interval_seconds, settings.tick.dispatch_batch) == (0.5, 20)
    assert settings.api_qps == 7.5
    # Every address of the pod, so that kubectl port-forward reaches them (issue 26).
    assert (settings.health_bind, settings.metrics_bind) == ("0.0.0.0:8080", "0.0.0.0:9090")
    assert (settings.run_api.namespace_rate, settings.run_api.pool_size) == (2.5, 6)
    assert settings.runs_api == RunsApiSettings(
        bind="0.0.0.0:8444",
        cert_dir=RUNS_API_MOUNT,
        pool_size=3,
        access_ttl_seconds=2.5,
    )
    assert settings.notify_allow == ("10.0.0.0/8", ".tools.svc.cluster.local")
    wide = operator_environment(render(helm_binary, sets=("rbac.clusterWide=true",)))
    assert read_settings(wide, run_api_mount).all_namespaces


def test_the_chart_sets_every_operator_setting(helm_binary, tmp_path):
    read = {
        name
        for source in SETTINGS_SOURCES
        for name in re.findall(r'"(PGSCHED_[A-Z_]+)"', source.read_text())
    }
    namespaced = operator_environment(render(helm_binary))
    wide = operator_environment(render(helm_binary, sets=("rbac.clusterWide=true",)))
    ui = operator_environment(
        render(helm_binary, sets=("ui.enabled=true", "ui.tls.secretName=ui-tls"))
    )
    runs = operator_environment(
        render(
            helm_binary,
            sets=("runsApi.enabled=true", "admissionWebhook.clientCAConfigMap=apiserver-webhook"),
        )
    )
    labels = operator_environment(render(helm_binary, values={"watchNamespaces": []}, tmp=tmp_path))
    chart = {key for key in {*namespaced, *wide, *ui, *runs, *labels} if key.startswith("PGSCHED_")}
    assert "PGSCHED_DSN" not in chart  # a file from the database Secret instead
    chart.add("PGSCHED_DSN")  # read where PGSCHED_DSN_FILE is (db/dsn.py)
    # The chart writes the webhook's configuration itself (templates/webhook.yaml); kopf
    # manages one only for an operator outside a cluster (docs/admission.md).
    chart.add("PGSCHED_WEBHOOK_CONFIGURATION")
    assert chart == read


def test_probes_use_the_operators_healthz_on_the_health_port(helm_binary):
    operator = container(render(helm_binary))
    ports = {port["name"]: port["containerPort"] for port in operator["ports"]}
    assert ports == {"health": 8080, "metrics": 9090, "run-api": 8443, "webhook": 9443}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert operator[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_database_connections_come_from_secrets_and_migrations_run_first(helm_binary):
    objects = render(helm_binary, sets=("database.dsn=host=db user=pgsched",))
    spec = deployment(objects)["spec"]["template"]["spec"]
    [secret] = [obj for obj in of_kind(objects, "Secret") if "stringData" in obj]

    assert [c["name"] for c in spec["initContainers"]] == ["migrate"]
    assert container(objects, "migrate")["args"] == ["migrate"]
    # A file from the Secret, never an environment variable (the pod spec and /proc show those).
    assert {
        "name": "database",
        "secret": {"secretName": "pgsched-database", "items": [{"key": "dsn", "path": "dsn"}]},
    } in spec["volumes"]
    for name in ("migrate", "operator"):
        env = container(objects, name)["env"]
        assert {"name": "PGSCHED_DSN_FILE", "value": "/etc/pgsched/database/dsn"} in env
        assert not [e for e in env if e["name"] == "PGSCHED_DSN" or "secretKeyRef" in str(e)]
        assert {
            "name": "database",
            "mountPath": "/etc/pgsched/database",
            "readOnly": True,
        } in container(objects, name)["volumeMounts"]
    assert secret["metadata"]["name"] == "pgsched-database"
    assert secret["stringData"] == {"dsn": "host=db user=pgsched"}
    no_migration = render(helm_binary, sets=("database.migrate=false",))
    assert "initContainers" not in deployment(no_migration)["spec"]["template"]["spec"]


def test_pods_meet_pod_security_restricted_by_default(helm_binary):
    spec = deployment(render(helm_binary))["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for item in spec["containers"] + spec["initContainers"]:
        context = item["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["readOnlyRootFilesystem"] is True
        assert {"name": "tmp", "mountPath": "/tmp"} in item["volumeMounts"]
    # emptyDir and secret are volume types Pod Security "restricted" allows.
    assert spec["volumes"] == [
        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        {
            "name": "database",
            "secret": {"secretName": "pgsched-database", "items": [{"key": "dsn", "path": "dsn"}]},
        },
        {"name": "run-api-tls", "secret": {"secretName": "pgsched-run-api-tls"}},
        {"name": "webhook-tls", "secret": {"secretName": "pgsched-webhook-tls"}},
    ]


# -- RBAC and namespaces -------------------------------------------------------------------------


def test_namespaced_mode_binds_one_role_per_watched_namespace_and_nothing_cluster_wide(
    helm_binary,
):
    objects = render(helm_binary, sets=("watchNamespaces={jobs,reports}",))
    assert "pgsched-system" not in {
        obj["metadata"].get("namespace") for obj in of_kind(objects, "Role")
    }

    roles = {obj["metadata"]["namespace"] for obj in of_kind(objects, "Role")}
    bindings = of_kind(objects, "RoleBinding")
    assert roles == {"jobs", "reports"}
    # Job pods need nothing of pgsched's in their namespaces: no Secret, no Service.
    assert {
        obj["metadata"]["namespace"] for obj in objects if obj["kind"] in ("Secret", "Service")
    } == {"pgsched-system"}
    assert {b["metadata"]["namespace"] for b in bindings} == {"jobs", "reports"}
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "pgsched", "namespace": "pgsched-system"}
        ]
    assert of_kind(objects, "ClusterRole") == of_kind(objects, "ClusterRoleBinding") == []


def test_by_default_namespaces_with_the_serve_label_are_served_by_a_narrowed_cluster_role(
    helm_binary, run_api_mount, tmp_path
):
    objects = render(helm_binary, values={"watchNamespaces": []}, tmp=tmp_path)
    listed = render(helm_binary)
    # A value of one's own replaces the default whole (a string, where a map would merge).
    own = render(
        helm_binary,
        values={"watchNamespaces": [], "namespaceLabels": "example.com/tier=batch, team=a"},
        tmp=tmp_path,
    )
    assert operator_environment(own)["PGSCHED_NAMESPACE_SELECTOR"] == (
        "example.com/tier=batch,team=a"
    )
    assert webhook_configuration(own)["webhooks"][0]["namespaceSelector"] == {
        "matchLabels": {"example.com/tier": "batch", "team": "a"}
    }
    served_own = named(own, "ValidatingAdmissionPolicy", "pgsched-served-namespaces")
    assert served_own["spec"]["validations"][0]["expression"].startswith(
        "namespaceObject.metadata.?labels[?'example.com/tier'].orValue('') == 'batch'"
        " && namespaceObject.metadata.?labels[?'team'].orValue('') == 'a'"
    )

    env = operator_environment(objects)
    settings = read_settings(env, run_api_mount)
    assert (settings.namespace_selector, settings.namespaces) == ("pgsched.dev/serve=true", ())
    assert of_kind(objects, "Role") == of_kind(objects, "RoleBinding") == []
    [cluster_role] = of_kind(objects, "ClusterRole")
    [binding] = of_kind(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    [role] = of_kind(listed, "Role")
    # The same rules, and the labelled Namespaces listed and watched.
    assert cluster_role["rules"] == [
        *role["rules"][: role["rules"].index(namespaces_rule(role))],
        namespaces_rule(role),
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
        *role["rules"][role["rules"].index(namespaces_rule(role)) + 1 :],
    ]
    labels = {"matchLabels": {"pgsched.dev/serve": "true"}}
    for webhook in webhook_configuration(objects)["webhooks"]:
        assert webhook["namespaceSelector"] == labels
    bindings = of_kind(objects, "ValidatingAdmissionPolicyBinding")
    job_template = [b for b in bindings if b["spec"]["policyName"] == "pgsched-job-template"]
    assert sorted(
        json.dumps(b["spec"]["matchResources"]["namespaceSelector"]) for b in job_template
    ) == sorted(
        [
            json.dumps(labels),
            json.dumps(
                {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "In",
                            "values": ["pgsched-system"],
                        }
                    ]
                }
            ),
        ]
    )
    served = named(objects, "ValidatingAdmissionPolicy", "pgsched-served-namespaces")
    [condition] = served["spec"]["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:pgsched-system:pgsched'"
    )
    [check] = served["spec"]["validations"]
    assert check["expression"] == (
        "namespaceObject.metadata.?labels[?'pgsched.dev/serve'].orValue('') == 'true'"
        " && (false || request.namespace != 'pgsched-system')"
    )
    unserved = named(objects, "ValidatingAdmissionPolicy", "pgsched-unserved-namespace")
    [warning] = unserved["spec"]["validations"]
    assert (
        "kubectl label namespace ' + request.namespace + ' pgsched.dev/serve=true'"
        in (warning["messageExpression"])
    )


def namespaces_rule(role: Obj) -> Obj:
    [rule] = [r for r in role["rules"] if r["resources"] == ["namespaces"]]
    return rule


def test_cluster_wide_mode_is_one_cluster_role_with_the_same_rules(helm_binary):
    namespaced = render(helm_binary)
    wide = render(helm_binary, sets=("rbac.clusterWide=true",))

    [role] = of_kind(namespaced, "Role")
    [cluster_role] = of_kind(wide, "ClusterRole")
    [binding] = of_kind(wide, "ClusterRoleBinding")
    assert cluster_role["rules"] == role["rules"]
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert of_kind(wide, "Role") == []


def test_the_ui_is_off_by_default_and_on_adds_only_its_port_service_and_access_reviews(
    helm_binary, run_api_mount
):
    default = render(helm_binary)
    assert "PGSCHED_UI_BIND" not in operator_environment(default)
    assert not [
        obj for obj in of_kind(default, "Service") if obj["metadata"]["name"].endswith("-ui")
    ]

    objects = render(helm_binary, sets=("ui.enabled=true",))
    env = operator_environment(objects)
    settings = read_settings(env, run_api_mount)
    # Every address of the pod, so that kubectl port-forward reaches it (issue 26).
    assert settings.ui_bind == "0.0.0.0:8090"
    assert (settings.ui_audience, settings.ui_cookie_secure) == ("pgsched-ui", "auto")
    assert not settings.ui_tls_cert_file
    [service] = [
        obj for obj in of_kind(objects, "Service") if obj["metadata"]["name"] == "pgsched-ui"
    ]
    assert service["spec"]["ports"] == [
        {"name": "ui", "port": 8090, "targetPort": "ui", "protocol": "TCP"}
    ]
    [cluster_role] = of_kind(objects, "ClusterRole")
    assert cluster_role["rules"] == [
        {
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["tokenreviews"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]
    [binding] = of_kind(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    [role] = of_kind(objects, "Role")
    [default_role] = of_kind(default, "Role")
    added = [rule for rule in role["rules"] if rule not in default_role["rules"]]
    assert added == [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]


def test_the_ui_serves_https_from_a_tls_secret_and_keeps_each_visitor_on_one_replica(
    helm_binary, run_api_mount
):
    objects = render(
        helm_binary,
        sets=("ui.enabled=true", "ui.tls.secretName=ui-cert", "ui.cookieSecure=always"),
    )
    env = operator_environment(objects)
    settings = read_settings(env, run_api_mount)
    assert (settings.ui_tls_cert_file, settings.ui_tls_key_file) == (
        "/etc/pgsched/ui-tls/tls.crt",
        "/etc/pgsched/ui-tls/tls.key",
    )
    assert settings.ui_cookie_secure == "always"
    spec = deployment(objects)["spec"]["template"]["spec"]
    assert {"name": "ui-tls", "secret": {"secretName": "ui-cert"}} in spec["volumes"]
    mount = {"name": "ui-tls", "mountPath": "/etc/pgsched/ui-tls", "readOnly": True}
    assert mount in container(objects)["volumeMounts"]
    # Sign-in sessions are kept by one replica: the Service keeps a visitor on it.
    [service] = [
        obj for obj in of_kind(objects, "Service") if obj["metadata"]["name"] == "pgsched-ui"
    ]
    assert service["spec"]["sessionAffinity"] == "ClientIP"


def test_service_monitor_needs_the_metrics_service(helm_binary):
    [monitor] = of_kind(
        render(helm_binary, sets=("metrics.serviceMonitor.enabled=true",)), "ServiceMonitor"
    )
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    result = helm(
        helm_binary,
        "template",
        "pgsched",
        CHART,
        "--set",
        WATCHED,
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.service.enabled=false",
    )
    assert result.returncode != 0 and "needs metrics.service.enabled=true" in result.stderr


# -- rollouts ----------------------------------------------------------------------------------


def checksums(objects: list[Obj]) -> dict[str, str]:
    annotations = deployment(objects)["spec"]["template"]["metadata"]["annotations"]
    return {key: value for key, value in annotations.items() if key.startswith("checksum/")}


def test_pod_template_checksums_change_with_settings_and_secrets_only(helm_binary):
    base = checksums(render(helm_binary, sets=("database.dsn=a",)))
    same = checksums(render(helm_binary, sets=("database.dsn=a",)))
    config = checksums(render(helm_binary, sets=("database.dsn=a", "config.logLevel=DEBUG")))
    secret = checksums(render(helm_binary, sets=("database.dsn=b",)))
    unrelated = checksums(render(helm_binary, sets=("database.dsn=a", "replicaCount=3")))

    assert same == base == unrelated
    assert config["checksum/config"] != base["checksum/config"]
    assert config["checksum/secret"] == base["checksum/secret"]
    assert secret["checksum/secret"] != base["checksum/secret"]
    assert secret["checksum/config"] == base["checksum/config"]


def test_image_is_the_app_version_unless_a_tag_or_digest_is_given(helm_binary):
    digest = "sha256:" + "a" * 64
    default = container(render(helm_binary))["image"]
    tagged = container(render(helm_binary, sets=("image.tag=dev",)))["image"]
    pinned = container(render(helm_binary, sets=("image.tag=dev", f"image.digest={digest}")))
    assert default == f"ghcr.io/pgsched/pgsched:{pgsched.__version__}"
    assert tagged == "ghcr.io/pgsched/pgsched:dev"
    assert pinned["image"] == f"ghcr.io/pgsched/pgsched@{digest}"


# -- the admission webhook ---------------------------------------------------------------------


def webhook_configuration(objects: list[Obj]) -> Obj:
    [found] = of_kind(objects, "ValidatingWebhookConfiguration")
    return found


def tls_secret(objects: list[Obj], name: str) -> Obj:
    [found] = [obj for obj in of_kind(objects, "Secret") if obj["metadata"]["name"] == name]
    assert found["type"] == "kubernetes.io/tls"
    return found


def named(objects: list[Obj], kind: str, name: str) -> Obj:
    [found] = [obj for obj in of_kind(objects, kind) if obj["metadata"]["name"] == name]
    return found


def test_the_webhook_is_on_by_default_fails_open_quickly_and_covers_the_watched_namespaces(
    helm_binary, run_api_mount
):
    objects = render(helm_binary, sets=("watchNamespaces={jobs,reports}",))
    env = operator_environment(objects)
    settings = read_settings(env, run_api_mount)
    assert settings.webhook.bind == "10.1.2.3:9443"
    assert settings.webhook.cert_dir == "/etc/pgsched/webhook"
    assert settings.webhook.configuration == ""  # the chart writes it, not the operator
    operator = container(objects)
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in operator["ports"]
    [mount] = [item for item in operator["volumeMounts"] if item["name"] == "webhook-tls"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/etc/pgsched/webhook", True)
    secret = tls_secret(objects, "pgsched-webhook-tls")
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    volume = next(
        v
        for v in deployment(objects)["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "webhook-tls"
    )
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]

    hooks = webhook_configuration(objects)["webhooks"]
    assert [hook["rules"][0]["resources"] for hook in hooks] == [
        ["scheduledjobs"],
        ["concurrencypools"],
        ["calendars"],
        ["notificationpolicies"],
    ]
    for hook in hooks:
        assert hook["failurePolicy"] == "Ignore"
        assert hook["timeoutSeconds"] == 5
        assert hook["sideEffects"] == "None"
        assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
        assert hook["namespaceSelector"]["matchExpressions"] == [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["jobs", "reports"]}
        ]
        client = hook["clientConfig"]
        assert client["service"] == {
            "name": "pgsched-webhook",
            "namespace": "pgsched-system",
            "path": "/" + hook["rules"][0]["resources"][0],  # kopf's handler id
            "port": 443,
        }
        assert client["caBundle"] == secret["data"]["ca.crt"]
    [service] = [
        o for o in of_kind(objects, "Service") if o["metadata"]["name"] == "pgsched-webhook"
    ]
    assert service["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    # Nothing cluster-scoped is granted for it: the operator never writes the configuration.
    assert of_kind(objects, "ClusterRole") == []


def test_the_webhook_covers_every_namespace_in_cluster_wide_mode(helm_binary):
    objects = render(helm_binary, sets=("rbac.clusterWide=true",))
    assert all(
        "namespaceSelector" not in hook for hook in webhook_configuration(objects)["webhooks"]
    )


def test_a_client_ca_config_map_makes_the_webhook_answer_only_its_certificates(helm_binary):
    objects = render(helm_binary, sets=("admissionWebhook.clientCAConfigMap=apiserver-webhook",))
    env = operator_environment(objects)
    assert env["PGSCHED_WEBHOOK_CLIENT_CA_FILE"] == "/etc/pgsched/webhook-client-ca/ca.crt"
    volumes = deployment(objects)["spec"]["template"]["spec"]["volumes"]
    [volume] = [v for v in volumes if v["name"] == "webhook-client-ca"]
    assert volume["configMap"] == {
        "name": "apiserver-webhook",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    mounts = {m["name"]: m["mountPath"] for m in container(objects)["volumeMounts"]}
    assert mounts["webhook-client-ca"] == "/etc/pgsched/webhook-client-ca"
    assert "PGSCHED_WEBHOOK_CLIENT_CA_FILE" not in operator_environment(render(helm_binary))


def test_turning_the_webhook_off_leaves_no_trace_of_it(helm_binary):
    objects = render(helm_binary, sets=("admissionWebhook.enabled=false",))
    assert of_kind(objects, "ValidatingWebhookConfiguration") == []
    assert not [o for o in objects if "webhook" in o["metadata"]["name"]]
    assert not [key for key in operator_environment(objects) if "WEBHOOK" in key]
    assert "webhook" not in {port["name"] for port in container(objects)["ports"]}


def test_cert_manager_issues_the_webhook_certificate_and_injects_its_ca(helm_binary):
    objects = render(
        helm_binary,
        sets=("admissionWebhook.certManager.enabled=true", "admissionWebhook.timeoutSeconds=3"),
    )
    certificate = named(objects, "Certificate", "pgsched-webhook")
    assert certificate["spec"]["secretName"] == "pgsched-webhook-tls"
    assert certificate["spec"]["issuerRef"] == {"kind": "Issuer", "name": "pgsched-webhook"}
    assert "pgsched-webhook.pgsched-system.svc" in certificate["spec"]["dnsNames"]
    assert named(objects, "Issuer", "pgsched-webhook")["spec"] == {
        "ca": {"secretName": "pgsched-webhook-ca"}
    }
    assert not [
        o for o in of_kind(objects, "Secret") if o["metadata"]["name"].startswith("pgsched-webhook")
    ]
    configuration = webhook_configuration(objects)
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "pgsched-system/pgsched-webhook"
    }
    for hook in configuration["webhooks"]:
        assert "caBundle" not in hook["clientConfig"]
        assert hook["timeoutSeconds"] == 3

    own = render(
        helm_binary,
        sets=(
            "admissionWebhook.certManager.enabled=true",
            "admissionWebhook.certManager.issuerRef.kind=ClusterIssuer",
            "admissionWebhook.certManager.issuerRef.name=internal-ca",
        ),
    )
    assert of_kind(own, "Issuer") == []
    [certificate] = of_kind(own, "Certificate")
    assert certificate["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "internal-ca"}


@pytest.mark.parametrize("timeout", ["0", "31"])
def test_the_schema_keeps_the_webhook_timeout_within_what_the_api_server_allows(
    helm_binary, timeout
):
    result = helm(
        helm_binary,
        "template",
        "pgsched",
        CHART,
        "--set",
        f"admissionWebhook.timeoutSeconds={timeout}",
    )
    assert result.returncode != 0
    assert "/admissionWebhook/timeoutSeconds" in result.stderr


# -- the run API -------------------------------------------------------------------------------


def handshake(secret: Obj, hostname: str, folder: Path) -> None:
    """A TLS handshake in memory between a server with the Secret's pair and a client that
    trusts its ca.crt alone and asks for ``hostname``, as a job pod's does; ssl.SSLError
    if the pod would refuse it."""
    data = {key: base64.b64decode(value) for key, value in secret["data"].items()}
    (folder / "tls.crt").write_bytes(data["tls.crt"])
    (folder / "tls.key").write_bytes(data["tls.key"])
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(cadata=data["ca.crt"].decode())
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    sides = [
        client.wrap_bio(to_client, to_server, server_hostname=hostname),
        server.wrap_bio(to_server, to_client, server_side=True),
    ]
    finished: set[int] = set()
    for _ in range(10):
        for index, side in enumerate(sides):
            try:
                side.do_handshake()
                finished.add(index)
            except ssl.SSLWantReadError:
                pass
        if len(finished) == 2:
            return
    raise AssertionError("the TLS handshake did not finish")


def test_job_pods_reach_the_run_api_through_its_service_trusting_the_charts_ca(
    helm_binary, tmp_path
):
    objects = render(helm_binary)
    env = operator_environment(objects)
    secret = tls_secret(objects, "pgsched-run-api-tls")
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    (mounted / "ca.crt").write_bytes(base64.b64decode(secret["data"]["ca.crt"]))

    settings = read_settings(env, mounted)

    url = "https://pgsched-run-api.pgsched-system.svc"
    assert settings.run_api.url == settings.jobs.run_api_url == url
    # The CA every Job carries is the one that signed the certificate the replicas serve.
    assert settings.jobs.run_api_ca == (mounted / "ca.crt").read_text()
    handshake(secret, "pgsched-run-api.pgsched-system.svc", tmp_path)
    assert settings.run_api.bind == "0.0.0.0:8443"
    assert {"name": "run-api", "containerPort": 8443, "protocol": "TCP"} in container(objects)[
        "ports"
    ]
    service = named(objects, "Service", "pgsched-run-api")
    assert service["spec"]["selector"] == deployment(objects)["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [
        {"name": "run-api", "port": 443, "targetPort": "run-api", "protocol": "TCP"}
    ]
    mount = {"name": "run-api-tls", "mountPath": RUN_API_MOUNT, "readOnly": True}
    assert mount in container(objects)["volumeMounts"]
    volumes = deployment(objects)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "run-api-tls", "secret": {"secretName": "pgsched-run-api-tls"}} in volumes


def test_a_run_api_url_of_its_own_is_given_to_pods_and_named_by_the_certificate(
    helm_binary, tmp_path, run_api_mount
):
    for url, host in (
        ("https://10.96.0.77", "10.96.0.77"),  # a cluster without DNS
        ("https://run-api.example.com:8443", "run-api.example.com"),
    ):
        objects = render(helm_binary, sets=(f"runApi.url={url}",))
        assert read_settings(operator_environment(objects), run_api_mount).jobs.run_api_url == url
        handshake(tls_secret(objects, "pgsched-run-api-tls"), host, tmp_path)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(tls_secret(objects, "pgsched-run-api-tls"), "elsewhere.example.com", tmp_path)


def test_cert_manager_signs_the_run_api_certificate_with_a_ca_that_outlives_it(helm_binary):
    """Pods are given ca.crt when they start: a self-signed serving certificate would be
    its own CA, and its renewal would cut off every running pod."""
    objects = render(helm_binary, sets=("runApi.certManager.enabled=true",))
    ca = named(objects, "Certificate", "pgsched-run-api-ca")
    assert ca["spec"]["isCA"] is True and ca["spec"]["secretName"] == "pgsched-run-api-ca"
    assert ca["spec"]["issuerRef"] == {"kind": "Issuer", "name": "pgsched-run-api-selfsigned"}
    assert named(objects, "Issuer", "pgsched-run-api-selfsigned")["spec"] == {"selfSigned": {}}
    assert named(objects, "Issuer", "pgsched-run-api")["spec"] == {
        "ca": {"secretName": "pgsched-run-api-ca"}
    }
    serving = named(objects, "Certificate", "pgsched-run-api")
    assert serving["spec"]["secretName"] == "pgsched-run-api-tls"
    assert serving["spec"]["issuerRef"] == {"kind": "Issuer", "name": "pgsched-run-api"}
    assert "pgsched-run-api.pgsched-system.svc" in serving["spec"]["dnsNames"]
    assert not [
        o for o in of_kind(objects, "Secret") if o["metadata"]["name"].startswith("pgsched-run")
    ]
    own = render(
        helm_binary,
        sets=(
            "runApi.certManager.enabled=true",
            "runApi.certManager.issuerRef.kind=ClusterIssuer",
            "runApi.certManager.issuerRef.name=internal-ca",
            "runApi.url=https://10.96.0.77",
        ),
    )
    [serving] = [c for c in of_kind(own, "Certificate") if "run-api" in c["metadata"]["name"]]
    assert serving["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "internal-ca"}
    assert serving["spec"]["ipAddresses"] == ["10.96.0.77"]
    assert not [i for i in of_kind(own, "Issuer") if "run-api" in i["metadata"]["name"]]


# -- the Run API (runs.pgsched.dev, the aggregation layer) ---------------------------------------


def api_service(objects: list[Obj]) -> Obj:
    [found] = of_kind(objects, "APIService")
    return found


def test_the_runs_api_is_off_by_default_and_leaves_no_trace(helm_binary):
    objects = render(helm_binary)
    assert of_kind(objects, "APIService") == []
    assert not [o for o in objects if "runs-api" in o["metadata"]["name"]]
    assert not [key for key in operator_environment(objects) if "RUNS_API" in key]
    operator = container(objects)
    assert "runs-api" not in {port["name"] for port in operator["ports"]}
    assert "runs-api-tls" not in {mount["name"] for mount in operator["volumeMounts"]}
    # Nothing cluster-scoped and nothing in kube-system: a namespaced install stays one.
    assert of_kind(objects, "ClusterRoleBinding") == []
    assert "kube-system" not in {o["metadata"].get("namespace") for o in objects}
    [policy] = of_kind(objects, "NetworkPolicy")
    assert "runs-api" not in str(policy["spec"]["ingress"])


def test_the_runs_api_registers_its_service_with_the_charts_ca_and_may_check_callers(
    helm_binary, tmp_path, run_api_mount
):
    objects = render(helm_binary, sets=("runsApi.enabled=true",), namespace="ops")
    secret = tls_secret(objects, "pgsched-runs-api-tls")
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}

    assert api_service(objects)["metadata"]["name"] == "v1alpha1.runs.pgsched.dev"
    assert "annotations" not in api_service(objects)["metadata"]
    assert api_service(objects)["spec"] == {
        "group": "runs.pgsched.dev",
        "version": "v1alpha1",
        "service": {"name": "pgsched-runs-api", "namespace": "ops", "port": 443},
        "caBundle": secret["data"]["ca.crt"],
        "groupPriorityMinimum": 1000,
        "versionPriority": 15,
    }
    # The aggregator trusts the caBundle alone and checks the name <service>.<namespace>.svc.
    handshake(secret, "pgsched-runs-api.ops.svc", tmp_path)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(secret, "pgsched-runs-api.pgsched-system.svc", tmp_path)
    service = named(objects, "Service", "pgsched-runs-api")
    assert service["metadata"]["namespace"] == "ops"
    assert service["spec"]["selector"] == deployment(objects)["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [
        {"name": "runs-api", "port": 443, "targetPort": "runs-api", "protocol": "TCP"}
    ]

    account = [{"kind": "ServiceAccount", "name": "pgsched", "namespace": "ops"}]
    delegator = named(objects, "ClusterRoleBinding", "pgsched-runs-api-auth-delegator")
    assert delegator["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:auth-delegator",
    }
    assert delegator["subjects"] == account
    reader = named(objects, "RoleBinding", "pgsched-runs-api-auth-reader")
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "extension-apiserver-authentication-reader",
    }
    assert reader["subjects"] == account
    # Nothing else cluster-scoped or in kube-system: built-in roles, no rules of the chart's.
    assert [o["metadata"]["name"] for o in of_kind(objects, "ClusterRoleBinding")] == [
        "pgsched-runs-api-auth-delegator"
    ]
    assert of_kind(objects, "ClusterRole") == []
    assert [o["kind"] for o in objects if o["metadata"].get("namespace") == "kube-system"] == [
        "RoleBinding"
    ]

    settings = read_settings(operator_environment(objects), run_api_mount)
    assert settings.runs_api == RunsApiSettings(
        bind="0.0.0.0:8444", cert_dir=RUNS_API_MOUNT, pool_size=2, access_ttl_seconds=10.0
    )
    operator = container(objects)
    assert {"name": "runs-api", "containerPort": 8444, "protocol": "TCP"} in operator["ports"]
    mount = {"name": "runs-api-tls", "mountPath": RUNS_API_MOUNT, "readOnly": True}
    assert mount in operator["volumeMounts"]
    volumes = deployment(objects)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "runs-api-tls", "secret": {"secretName": "pgsched-runs-api-tls"}} in volumes
    [policy] = of_kind(objects, "NetworkPolicy")
    assert {"ports": [{"port": "runs-api", "protocol": "TCP"}]} in policy["spec"]["ingress"]

    unbound = render(helm_binary, sets=("runsApi.enabled=true", "rbac.create=false"))
    assert of_kind(unbound, "ClusterRoleBinding") == of_kind(unbound, "RoleBinding") == []
    assert api_service(unbound)["spec"]["service"]["name"] == "pgsched-runs-api"


def test_cert_manager_issues_the_runs_api_certificate_and_injects_its_ca(helm_binary):
    objects = render(helm_binary, sets=("runsApi.enabled=true", "runsApi.certManager.enabled=true"))
    registration = api_service(objects)
    assert registration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "pgsched-system/pgsched-runs-api"
    }
    assert "caBundle" not in registration["spec"]
    certificate = named(objects, "Certificate", "pgsched-runs-api")
    assert certificate["spec"]["secretName"] == "pgsched-runs-api-tls"
    assert certificate["spec"]["issuerRef"] == {"kind": "Issuer", "name": "pgsched-runs-api"}
    assert "pgsched-runs-api.pgsched-system.svc" in certificate["spec"]["dnsNames"]
    assert named(objects, "Issuer", "pgsched-runs-api")["spec"] == {
        "ca": {"secretName": "pgsched-runs-api-ca"}
    }
    assert not [
        o for o in of_kind(objects, "Secret") if o["metadata"]["name"].startswith("pgsched-runs")
    ]
    volumes = deployment(objects)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "runs-api-tls", "secret": {"secretName": "pgsched-runs-api-tls"}} in volumes

    own = render(
        helm_binary,
        sets=(
            "runsApi.enabled=true",
            "runsApi.certManager.enabled=true",
            "runsApi.certManager.issuerRef.kind=ClusterIssuer",
            "runsApi.certManager.issuerRef.name=internal-ca",
        ),
    )
    [serving] = [c for c in of_kind(own, "Certificate") if "runs-api" in c["metadata"]["name"]]
    assert serving["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "internal-ca"}
    assert not [i for i in of_kind(own, "Issuer") if "runs-api" in i["metadata"]["name"]]
    assert "cert-manager.io/inject-ca-from" in api_service(own)["metadata"]["annotations"]


# -- tenants: where jobs run, what they may name -------------------------------------------------


def test_jobs_never_run_in_the_release_namespace_unless_the_admin_allows_it(
    helm_binary, run_api_mount
):
    def template(setting: str) -> subprocess.CompletedProcess[str]:
        return helm(
            helm_binary, "template", "pgsched", CHART, "-n", "pgsched-system", "--set", setting
        )

    nothing = template("namespaceLabels=null")
    home = template("watchNamespaces={pgsched-system}")
    assert nothing.returncode != 0
    assert "namespaceLabels and watchNamespaces are both empty" in nothing.stderr
    assert "--set watchNamespaces='{jobs}'" in nothing.stderr
    assert home.returncode != 0
    assert "watchNamespaces includes the release namespace pgsched-system" in home.stderr
    assert "allowReleaseNamespace=true" in home.stderr
    allowed = render(
        helm_binary, sets=("watchNamespaces={pgsched-system}", "allowReleaseNamespace=true")
    )
    env = operator_environment(allowed)
    policy = read_settings(env, run_api_mount).jobs.policy
    assert policy.allow_operator_namespace


def test_the_operator_gets_the_job_template_policy_the_admission_policy_enforces(
    helm_binary, run_api_mount
):
    sets = ("jobTemplatePolicy.serviceAccounts={default,reports}", "jobTemplatePolicy.secrets={s}")
    objects = render(helm_binary, sets=sets)
    env = operator_environment(objects)
    policy = read_settings(env, run_api_mount).jobs.policy
    assert policy.operator_namespace == "pgsched-system"
    assert policy.operator_service_account == "pgsched"
    assert policy.operator_secrets == ("pgsched-database",)
    assert not policy.allow_operator_namespace
    assert (policy.service_accounts, policy.secrets) == (("default", "reports"), ("s",))
    variables = {
        variable["name"]: variable["expression"]
        for obj in of_kind(objects, "ValidatingAdmissionPolicy")
        if obj["metadata"]["name"] == "pgsched-job-template"
        for variable in obj["spec"]["variables"]
    }
    assert json.loads(variables["chartAccounts"]) == ["default", "reports"]
    assert json.loads(variables["chartSecrets"]) == ["s"]
    assert variables["operatorAccount"] == "'pgsched'"
    assert json.loads(variables["operatorSecrets"]) == ["pgsched-database"]


def test_admission_policies_bind_to_this_releases_namespaces_and_its_account(helm_binary):
    objects = render(helm_binary, sets=("watchNamespaces={jobs,reports}",))
    policies = {
        obj["metadata"]["name"]: obj for obj in of_kind(objects, "ValidatingAdmissionPolicy")
    }
    bindings = {
        obj["spec"]["policyName"]: obj
        for obj in of_kind(objects, "ValidatingAdmissionPolicyBinding")
    }
    assert (
        set(policies)
        == set(bindings)
        == {
            "pgsched-job-template",
            "pgsched-lease-secrets",
            "pgsched-requester",  # templates/requester-policy.yaml, the CLI's requests
            "pgsched-unserved-namespace",  # a warning at kubectl apply, never a refusal
        }
    )
    assert {name: binding["spec"]["validationActions"] for name, binding in bindings.items()} == {
        "pgsched-job-template": ["Deny"],
        "pgsched-lease-secrets": ["Deny"],
        "pgsched-requester": ["Deny"],
        "pgsched-unserved-namespace": ["Warn"],
    }
    [unserved] = policies["pgsched-unserved-namespace"]["spec"]["validations"]
    assert unserved["expression"] == (
        'request.namespace == \'pgsched-system\' || request.namespace in ["jobs","reports"]'
    )
    assert "--set watchNamespaces=" in unserved["messageExpression"]
    selector = bindings["pgsched-job-template"]["spec"]["matchResources"]["namespaceSelector"]
    assert selector["matchExpressions"] == [
        {
            "key": "kubernetes.io/metadata.name",
            "operator": "In",
            "values": ["jobs", "reports", "pgsched-system"],
        }
    ]
    [condition] = policies["pgsched-lease-secrets"]["spec"]["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:pgsched-system:pgsched'"
    )
    wide = render(helm_binary, sets=("rbac.clusterWide=true",))
    [binding] = [
        obj
        for obj in of_kind(wide, "ValidatingAdmissionPolicyBinding")
        if obj["spec"]["policyName"] == "pgsched-job-template"
    ]
    assert "matchResources" not in binding["spec"]  # every namespace, as the ClusterRole
    off = render(helm_binary, sets=("admissionPolicies.enabled=false",))
    left = [obj["metadata"]["name"] for obj in of_kind(off, "ValidatingAdmissionPolicy")]
    assert left == ["pgsched-requester"]  # requesterPolicy.enabled is its own switch


def test_the_network_policy_admits_only_the_operators_ports(helm_binary):
    peer = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    objects = render(
        helm_binary,
        sets=(
            "ui.enabled=true",
            "runsApi.enabled=true",
            "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
        ),
    )
    [policy] = of_kind(objects, "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "operator"
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {"ports": [{"port": "health", "protocol": "TCP"}]},
        {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": [peer]},
        # Job pods, from whichever namespace they run in.
        {"ports": [{"port": "run-api", "protocol": "TCP"}], "from": [{"namespaceSelector": {}}]},
        {"ports": [{"port": "ui", "protocol": "TCP"}]},
        {"ports": [{"port": "webhook", "protocol": "TCP"}]},
        # The API server's aggregation layer, as the webhook's caller.
        {"ports": [{"port": "runs-api", "protocol": "TCP"}]},
    ]
    ports = {port["name"] for port in container(objects)["ports"]}
    assert ports == {"health", "metrics", "run-api", "ui", "webhook", "runs-api"}
    assert "egress" not in policy["spec"]
    assert (
        of_kind(render(helm_binary, sets=("networkPolicy.enabled=false",)), "NetworkPolicy") == []
    )


def test_the_optional_egress_policy_allows_dns_public_receivers_and_the_rules_given(
    helm_binary, tmp_path
):
    api_server = {"to": [{"ipBlock": {"cidr": "10.96.0.1/32"}}], "ports": [{"port": 443}]}
    values = {"networkPolicy": {"egress": {"enabled": True, "rules": [api_server]}}}
    [policy] = of_kind(render(helm_binary, values=values, tmp=tmp_path), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    dns, public, given = policy["spec"]["egress"]
    assert {port["port"] for port in dns["ports"]} == {53} and "to" not in dns
    v4, v6 = (peer["ipBlock"] for peer in public["to"])
    assert v4["cidr"] == "0.0.0.0/0" and {"10.0.0.0/8", "169.254.0.0/16", "127.0.0.0/8"} <= set(
        v4["except"]
    )
    assert v6 == {"cidr": "::/0", "except": ["::1/128", "fc00::/7", "fe80::/10"]}
    assert given == api_server
