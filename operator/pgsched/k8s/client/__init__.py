"""The Kubernetes client: the only part of the operator that speaks HTTP to the API server.

``api`` is the REST client (authentication from the official client's config loaders,
requests through urllib3, a client-side token bucket from ``ratelimit``, Retry-After
honoured); the rest of the operator receives an ``api.KubeApi`` and calls its methods,
and never imports ``kubernetes`` or ``urllib3`` itself (pyproject.toml's import-linter
contracts). Beside it, the machinery every controller shares: ``watch`` (list, then
watch, re-listed after 410 Gone), ``workqueue`` (keyed, bounded, one worker per key),
``controller`` (a watch feeding a work queue and the threads that drain it) and
``finalizers`` (pgsched's finalizer added and released, resourceVersion-checked).
"""
