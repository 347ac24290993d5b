"""Local infrastructure for tests, benchmarks and the quickstart: a throwaway Postgres and a
real Kubernetes cluster with one real node. Not part of the ``pgsched`` package: it is not in
the wheel or the image, and ``make lint`` (import-linter) forbids ``pgsched`` to import it.

- ``postgres`` starts a throwaway PostgreSQL server (Debian's postgresql-15).
- ``controlplane`` starts and stops etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler and the node (also ``python -m devenv.controlplane up``).
- ``node`` is the real node: containerd + runc + kubelet + kube-proxy in a network
  namespace of its own, running the images ``make images`` built.
- ``adminclient`` is the small admin HTTP client (not the operator's ``pgsched.k8s.client.api``);
  ``waiting`` holds ``wait_for``.

See docs/local-cluster.md for how it works and what it cannot do.
"""
