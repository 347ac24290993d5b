"""The operator: ScheduledJob resources drive the engine, runs become batch/v1 Jobs.

Only this package talks to the Kubernetes API, and only through ``api.KubeApi`` (rate
limited, 429-aware) or kopf's own watches. Handlers are thin adapters; the rules live in
the engine.

- ``names``      labels, annotations and naming rules shared by everything below
- ``api``        a small REST client with a client-side rate limiter and Retry-After handling
- ``jobs``       build the Job for a run (pure)
- ``launcher``   the engine's Launcher: create that Job, idempotently
- ``outcomes``   read a finished Job and its pods into a run outcome (pure), apply it fenced
- ``status``     render a ScheduledJob's status from the database (pure)
- ``publisher``  turn run events into Kubernetes Events, status patches and Job cleanup
- ``handlers``   kopf handlers for ScheduledJobs and our Jobs
- ``operator``   wiring: settings, the tick and publisher threads, kopf
"""
