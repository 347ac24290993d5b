"""The operator: ScheduledJob resources drive the engine, runs become batch/v1 Jobs.

Only this package talks to the Kubernetes API, and only through ``api.KubeApi`` (rate
limited, 429-aware); its watches too. Handlers are thin adapters; the rules live in the
engine.

- ``names``      labels, annotations and naming rules shared by everything below
- ``api``        a small REST client with a client-side rate limiter and Retry-After handling
- ``jobs``       build the Job for a run (pure)
- ``launcher``   the engine's Launcher: create that Job, idempotently
- ``outcomes``   read a finished Job and its pods into a run outcome (pure), apply it fenced
- ``status``     render a ScheduledJob's status from the database (pure)
- ``publisher``  turn run events into Kubernetes Events and status patches
- ``cleanup``    delete the Jobs of ended runs and those beyond the history limits
- ``gauges``     queue depth and failure streaks, read from the database
- ``verdicts``   settle silent container runs from their Jobs (I8)
- ``resync``     record Job outcomes the watch missed
- ``watch``      list-then-watch of one resource, resumed, re-listed after ``410 Gone``
- ``workqueue``  a keyed, bounded queue: one worker per key, newest value wins, retries
- ``controller`` a watch feeding a work queue, and the worker threads that drain one
- ``scheduledjobs`` a ScheduledJob becomes its definition (sync); what Kubernetes is told
                 back (write): finalizer, status, Events
- ``finalizers`` add and release pgsched's finalizer, resourceVersion-checked
- ``jobevents``  our Jobs' ends become their runs' outcomes
- ``concurrencypools`` ConcurrencyPools become pools in the database
- ``health``     the liveness and readiness endpoint
- ``operator``   wiring: settings, the tick and publisher threads (``engine.loop``), the
                 watches and their workers
"""
