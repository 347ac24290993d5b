"""Reading Pod Security's warning on a Job, and whether the namespace enforces it.

The cluster test (tests/cluster/test_real_node.py) proves it against the real admission;
these pin the parsing of the header and the level/version rule."""

from __future__ import annotations

from pgsched.k8s.client.api import warning_texts
from pgsched.k8s.jobside.podsecurity import Violation, enforced, violation_in

# As kube-apiserver 1.37 sends it (one header per warning, the text a quoted-string).
HEADER = (
    '299 - "would violate PodSecurity \\"restricted:latest\\": privileged (container \\"main\\"'
    " must not set securityContext.privileged=true), runAsNonRoot != true (pod or container"
    ' \\"main\\" must set securityContext.runAsNonRoot=true)"'
)


def test_a_warning_header_is_unquoted_and_its_violation_read():
    [text] = warning_texts([HEADER])
    assert text.startswith('would violate PodSecurity "restricted:latest": privileged (container')
    violation = violation_in(["unrelated deprecation warning", text])
    assert violation is not None
    assert (violation.level, violation.version) == ("restricted", "latest")
    assert violation.detail.startswith('privileged (container "main" must not set')


def test_other_warnings_are_not_violations():
    assert violation_in(warning_texts(['299 - "batch/v1beta1 CronJob is deprecated"'])) is None
    assert violation_in([]) is None


def test_a_violation_is_enforced_at_the_same_or_a_stricter_level_and_the_same_version():
    baseline = Violation("baseline", "latest", "privileged (...)")
    restricted = Violation("restricted", "latest", "runAsNonRoot != true (...)")
    ns = "pod-security.kubernetes.io/enforce"
    assert enforced(baseline, {ns: "baseline"})
    assert enforced(baseline, {ns: "restricted"})  # restricted includes baseline's checks
    assert enforced(restricted, {ns: "restricted", f"{ns}-version": "latest"})
    assert not enforced(restricted, {ns: "baseline"})  # warned stricter than enforced
    assert not enforced(restricted, {ns: "privileged"})
    assert not enforced(restricted, {"pod-security.kubernetes.io/warn": "restricted"})
    assert not enforced(restricted, {ns: "restricted", f"{ns}-version": "v1.30"})
    assert enforced(
        Violation("restricted", "v1.30", "x"), {ns: "restricted", f"{ns}-version": "v1.30"}
    )
    assert not enforced(restricted, {ns: "nonsense"})
