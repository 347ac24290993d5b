"""Local infrastructure for tests, benchmarks and the quickstart: a throwaway Postgres and
a real Kubernetes control plane — no containers needed. Never imported by the operator.

There is no container runtime, kind or k3s on our machines, yet pgsched's Kubernetes side
must be tested against the real thing: CRD schema validation, printer columns, RBAC, Pod
Security admission, watch semantics, the Job controller and the garbage collector. So this
package runs the real control plane (etcd, kube-apiserver and kube-controller-manager built
from the official Go modules by ``hack/k8s/build.sh``) and replaces only the kubelet and the
scheduler with a *process node* that binds pods to itself and runs their containers as local
processes.

- ``postgres`` starts a throwaway PostgreSQL server (Debian's postgresql-15).
- ``controlplane`` starts and stops etcd, kube-apiserver, kube-controller-manager and process
  nodes (also ``python -m devenv.controlplane up``).
- ``processnode`` is the local node (also ``python -m devenv.processnode``).
- ``adminclient`` is the small admin HTTP client both use (not the operator's ``pgsched.k8s.api``); ``waiting`` holds ``wait_for``.

See docs/local-cluster.md for how it works and what it cannot do.
"""
