"""The Run API: runs as Kubernetes objects, served from PostgreSQL through the
aggregation layer (``kubectl get runs``), never stored in etcd (docs/runs-api.md).

``frontproxy`` says who is asking (the API server's front-proxy certificate, then its
user headers), ``store`` reads the runs, ``resources`` shapes them as Kubernetes
objects and tables, and ``server`` answers, asking RBAC (``k8s.access``) before any data.
"""
