"""The Job built for a run: deterministic, owned, fenced, with the heartbeat sidecar."""

from __future__ import annotations

import copy
import json

from k8sfixtures import RUN_API_CA, RUN_API_URL, T0, TEMPLATE, definition, job_settings, run
from pgsched.k8s import names
from pgsched.k8s.jobside import jobs

TOKEN = "99999999-8888-7777-6666-555555555555"
LEASE_REF = {"secretKeyRef": {"name": "nightly-report-42-lease", "key": "lease-token"}}

SETTINGS = job_settings()


def env_of(container):
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def test_job_is_named_labelled_owned_and_never_retried_by_kubernetes():
    job = jobs.build(definition(), run(), SETTINGS)
    meta = job["metadata"]
    assert meta["name"] == "nightly-report-42"
    assert meta["labels"] == {
        "team": "data",
        names.LABEL_RUN_ID: "42",
        names.LABEL_SCHEDULED_JOB: "nightly-report",
        names.LABEL_ATTEMPT: "1",
    }
    assert meta["annotations"][names.ANNOTATION_LEASE_SHA256] == names.lease_fingerprint(TOKEN)
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "ScheduledJob",
        "11111111-2222-3333-4444-555555555555",
        True,
    )
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["template"]["metadata"]["labels"][names.LABEL_RUN_ID] == "42"


def test_a_job_carries_what_its_run_row_needs_to_be_restored_after_a_failover():
    """trigger, retry-of, upstream run, run-now token and parameters: with the labels, scheduled-for
    and the owner, a row a failover lost can be rebuilt from the Job (k8s/failover/restoration.py)."""
    scheduled = jobs.build(definition(), run(), SETTINGS)["metadata"]["annotations"]
    assert scheduled[names.ANNOTATION_TRIGGER] == "schedule"
    assert scheduled[names.ANNOTATION_SCHEDULED_FOR] == T0.isoformat()
    assert not {names.ANNOTATION_RETRY_OF, names.ANNOTATION_REQUEST_TOKEN} & scheduled.keys()
    manual = jobs.build(definition(), run(trigger="manual", request_token="t-1"), SETTINGS)
    assert manual["metadata"]["annotations"][names.ANNOTATION_REQUEST_TOKEN] == "t-1"
    assert names.ANNOTATION_PARAMETERS not in manual["metadata"]["annotations"]
    given = run(trigger="manual", request_token="t-2", parameters={"region": "us", "day": "1"})
    carried = jobs.build(definition(), given, SETTINGS)["metadata"]["annotations"]
    assert json.loads(carried[names.ANNOTATION_PARAMETERS]) == {"region": "us", "day": "1"}
    retry = jobs.build(
        definition(), run(trigger="retry", attempt=2, retry_of=41, upstream_run_id=7), SETTINGS
    )["metadata"]
    assert retry["annotations"][names.ANNOTATION_RETRY_OF] == "41"
    assert retry["annotations"][names.ANNOTATION_UPSTREAM_RUN] == "7"
    assert retry["labels"][names.LABEL_ATTEMPT] == "2"


def test_heartbeat_runs_as_a_native_sidecar_with_the_lease_and_the_run_api():
    pod = jobs.build(definition(), run(), SETTINGS)["spec"]["template"]["spec"]
    [sidecar] = pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["command"] == ["pgsched", "heartbeat"]
    assert sidecar["image"] == SETTINGS.image
    env = env_of(sidecar)
    assert env["PGSCHED_RUN_ID"] == "42"
    assert env["PGSCHED_LEASE_TOKEN"] == LEASE_REF
    assert (env["PGSCHED_RUN_API_URL"], env["PGSCHED_RUN_API_CA"]) == (RUN_API_URL, RUN_API_CA)
    assert sidecar["securityContext"]["runAsNonRoot"] is True
    # kubelet starts the workload only once the sidecar says SIGTERM will reach it.
    hook = sidecar["lifecycle"]["postStart"]["exec"]["command"]
    assert hook[:2] == ["sh", "-c"] and "/pgsched/heartbeat-listening" in hook[2]
    [main] = pod["containers"]
    assert env_of(main)["PGSCHED_CANCEL_FILE"] == "/pgsched/cancel"
    assert "PGSCHED_LEASE_TOKEN" not in env_of(main)
    assert {"name": "pgsched", "mountPath": "/pgsched"} in main["volumeMounts"]


def test_sdk_jobs_run_the_runner_instead_of_a_sidecar():
    spec = {
        "jobTemplate": TEMPLATE,
        "job": {"kind": "report", "args": {"days": 7}, "modules": ["app.jobs"]},
    }
    pod = jobs.build(definition(spec=spec), run(), SETTINGS)["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    [main] = pod["containers"]
    assert main["command"] == ["pgsched", "run"]
    env = env_of(main)
    assert (env["PGSCHED_JOB_KIND"], env["PGSCHED_JOB_ARGS"], env["PGSCHED_JOB_MODULES"]) == (
        "report",
        '{"days": 7}',
        "app.jobs",
    )
    assert env["PGSCHED_LEASE_TOKEN"] == LEASE_REF
    assert (env["PGSCHED_RUN_API_URL"], env["PGSCHED_RUN_API_CA"]) == (RUN_API_URL, RUN_API_CA)
    # The runner's last words reach the run's error when it cannot start.
    assert main["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_an_sdk_containers_own_termination_message_policy_is_kept():
    template = copy.deepcopy(TEMPLATE)
    template["spec"]["template"]["spec"]["containers"][0]["terminationMessagePolicy"] = "File"
    spec = {"jobTemplate": template, "job": {"kind": "report"}}
    pod = jobs.build(definition(spec=spec), run(), SETTINGS)["spec"]["template"]["spec"]
    assert pod["containers"][0]["terminationMessagePolicy"] == "File"


def test_pods_get_no_database_connection_and_no_secret_but_their_lease():
    """Job pods talk to the run API: no connection string, no Secret of pgsched's but the
    run's own lease, in the sidecar or the SDK runner alike (docs/run-api.md)."""
    for spec in ({"jobTemplate": TEMPLATE}, {"jobTemplate": TEMPLATE, "job": {"kind": "k"}}):
        job = jobs.build(definition(spec=spec), run(), SETTINGS)
        pod = job["spec"]["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            assert "PGSCHED_DSN" not in env_of(container)
            assert "PGSCHED_DSN_FILE" not in env_of(container)
            assert not container.get("envFrom")
        references = [
            item["valueFrom"]["secretKeyRef"]
            for container in pod["containers"] + pod.get("initContainers", [])
            for item in container["env"]
            if "secretKeyRef" in item.get("valueFrom", {})
        ]
        assert references == [LEASE_REF["secretKeyRef"]]
        assert [v for v in pod["volumes"] if "secret" in v] == []


def test_the_lease_token_is_nowhere_in_the_job_only_in_its_secret():
    for spec in ({"jobTemplate": TEMPLATE}, {"jobTemplate": TEMPLATE, "job": {"kind": "k"}}):
        job = jobs.build(definition(spec=spec), run(), SETTINGS)
        assert TOKEN not in json.dumps(job)
    secret = jobs.lease_secret(definition(), run())
    assert secret["metadata"]["name"] == "nightly-report-42-lease"
    assert secret["stringData"] == {"lease-token": TOKEN}
    [owner] = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("ScheduledJob", "11111111-2222-3333-4444-555555555555")


def test_a_job_of_an_older_release_is_recognised_by_its_clear_text_token():
    legacy = {names.LEGACY_ANNOTATION_LEASE: TOKEN}
    assert names.job_lease_fingerprint(legacy) == names.lease_fingerprint(TOKEN)
    assert names.job_lease_fingerprint({}) is None


def test_active_deadline_is_passed_to_the_job_and_the_template_is_not_mutated():
    job = jobs.build(definition(active_deadline_seconds=600), run(), SETTINGS)
    assert job["spec"]["activeDeadlineSeconds"] == 600
    assert "initContainers" not in TEMPLATE["spec"]["template"]["spec"]


def test_long_names_are_shortened_to_fit_a_label_value():
    name = "a" * 70
    built = jobs.build(definition(name=name), run(id=123456789), SETTINGS)
    assert built["metadata"]["name"] == "a" * 53 + "-123456789"
    assert len(built["metadata"]["labels"][names.LABEL_SCHEDULED_JOB]) == 63


def test_job_pods_get_no_api_token_unless_the_template_asks_for_one():
    built = jobs.build(definition(), run(), SETTINGS)
    assert built["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    asking = definition()
    pod_spec = asking.spec["jobTemplate"]["spec"]["template"]["spec"]
    pod_spec["automountServiceAccountToken"] = True
    built = jobs.build(asking, run(), SETTINGS)
    assert built["spec"]["template"]["spec"]["automountServiceAccountToken"] is True


def shared(pod_extra):
    template = json.loads(json.dumps(TEMPLATE))
    template["spec"]["template"]["spec"].update(pod_extra)
    pod = jobs.build(definition(spec={"jobTemplate": template}), run(), SETTINGS)
    return env_of(pod["spec"]["template"]["spec"]["initContainers"][-1])


def test_the_sidecar_watches_the_workload_exit_only_in_a_pod_sharing_its_processes():
    """It then notes the workload's end at once, not at kubelet's SIGTERM (Replace starts
    the next run sooner); not with a native sidecar of the pod's own, whose restart would
    look like the workload ending."""
    assert "PGSCHED_SHARED_PROCESS_NAMESPACE" not in shared({})
    assert shared({"shareProcessNamespace": True})["PGSCHED_SHARED_PROCESS_NAMESPACE"] == "true"
    own_sidecar = {"name": "proxy", "image": "busybox", "restartPolicy": "Always"}
    with_own = shared({"shareProcessNamespace": True, "initContainers": [own_sidecar]})
    assert "PGSCHED_SHARED_PROCESS_NAMESPACE" not in with_own
    plain_init = {"name": "setup", "image": "busybox"}
    with_init = shared({"shareProcessNamespace": True, "initContainers": [plain_init]})
    assert with_init["PGSCHED_SHARED_PROCESS_NAMESPACE"] == "true"


def pod_spec_of(**accounts):
    template = json.loads(json.dumps(TEMPLATE))
    template["spec"]["template"]["spec"].update(accounts)
    built = jobs.build(definition(spec={"jobTemplate": template}), run(), SETTINGS)
    return built["spec"]["template"]["spec"]


def test_the_job_names_the_service_account_the_policy_judged_and_drops_the_deprecated_field():
    """The API server runs a pod whose serviceAccountName is empty as its deprecated
    serviceAccount, and one with both as serviceAccountName: the built Job says exactly
    that account, in serviceAccountName alone, so what runs is what was judged."""
    alias = pod_spec_of(serviceAccountName="", serviceAccount="reports")
    assert alias["serviceAccountName"] == "reports" and "serviceAccount" not in alias
    both = pod_spec_of(serviceAccountName="reports", serviceAccount="admin")
    assert both["serviceAccountName"] == "reports" and "serviceAccount" not in both
    alone = pod_spec_of(serviceAccount="reports")
    assert alone["serviceAccountName"] == "reports" and "serviceAccount" not in alone
    default = pod_spec_of(serviceAccountName="", serviceAccount="")
    assert "serviceAccountName" not in default and "serviceAccount" not in default
    assert "serviceAccountName" not in pod_spec_of()


def kubelet_expand(text: str, variables: dict[str, str]) -> str:
    """kubelet's expansion of a container's env values, command and args (Kubernetes'
    third_party/forked/golang/expansion): ``$(NAME)`` becomes the variable's value when
    it is defined, ``$$`` becomes ``$``, anything else stays as written."""
    out, index = [], 0
    while index < len(text):
        if text[index] != "$" or index + 1 == len(text):
            out.append(text[index])
            index += 1
        elif text[index + 1] == "$":
            out.append("$")
            index += 2
        elif text[index + 1] == "(" and ")" in text[index + 2 :]:
            end = text.index(")", index + 2)
            name = text[index + 2 : end]
            out.append(variables.get(name, f"$({name})"))
            index = end + 1
        else:
            out.append(text[index : index + 2])
            index += 2
    return "".join(out)


POD_ENV = {"DB_PASSWORD": "hunter2", "HOME": "/tmp"}
LITERALS = {"day": "$(DB_PASSWORD)", "note": "$$(HOME) costs $5, $", "plain": "eu-west-1"}


def test_kubelet_expand_follows_kubernetes_rules():
    assert kubelet_expand("$(DB_PASSWORD)", POD_ENV) == "hunter2"
    assert kubelet_expand("$$(DB_PASSWORD)", POD_ENV) == "$(DB_PASSWORD)"
    assert kubelet_expand("$$$(HOME) $(NOPE) $x $", POD_ENV) == "$/tmp $(NOPE) $x $"


def parameters_spec(**extra):
    template = json.loads(json.dumps(TEMPLATE))
    declared = [{"name": name} for name in LITERALS]
    return definition(spec={"jobTemplate": template, "parameters": declared, **extra})


def test_parameter_values_reach_the_workload_as_given_not_expanded_by_kubelet():
    """A value such as $(DB_PASSWORD) would be replaced by kubelet with the pod's variable
    of that name: the Job carries it escaped ($ doubled), so the workload reads it as given."""
    built = jobs.build(parameters_spec(), run(parameters=LITERALS), SETTINGS)
    env = env_of(built["spec"]["template"]["spec"]["containers"][0])
    assert env["PGSCHED_PARAM_DAY"] == "$$(DB_PASSWORD)"
    for name, value in LITERALS.items():
        assert kubelet_expand(env[f"PGSCHED_PARAM_{name.upper()}"], POD_ENV) == value


def test_sdk_keyword_arguments_from_parameters_are_escaped_too():
    job = {"kind": "report", "args": {"n": 2}}
    built = jobs.build(parameters_spec(job=job), run(parameters=LITERALS), SETTINGS)
    env = env_of(built["spec"]["template"]["spec"]["containers"][0])
    arguments = json.loads(kubelet_expand(env["PGSCHED_JOB_ARGS"], POD_ENV))
    assert arguments == {"n": 2, **LITERALS}
