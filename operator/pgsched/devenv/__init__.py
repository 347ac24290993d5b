"""Local development infrastructure: a throwaway Postgres server and a real Kubernetes
control plane with a process node. Used by the tests, the benchmarks and ``make demo``;
never imported by the operator itself."""
