"""The operator: ScheduledJob resources drive the engine, runs become batch/v1 Jobs.

Only this package talks to the Kubernetes API, and inside it only ``client`` imports the
libraries that do (``api.KubeApi``: rate limited, 429-aware; its watches too); every other
part is handed a ``KubeApi``. Handlers are thin adapters; the rules live in the engine.
One subpackage per role, layered from the top (pyproject.toml's import-linter contracts):

- ``serve``          the process: wiring (``operator``), settings, ``/healthz``, gauges,
                     the admission webhook
- ``scheduledjobs``  a ScheduledJob becomes its definition (sync) and what Kubernetes is
                     told back (writer); request annotations; the suspend reason
- ``kinds``          ConcurrencyPools, Calendars, NotificationPolicies into the database
- ``failover``       after a failover: lost runs restored, runs revalidated from their Jobs
- ``reporting``      run status changes become Events and ScheduledJob statuses
- ``notifications``  notifications delivered to their receivers
- ``jobside``        a claimed run becomes a Job; a Job's life becomes its run's outcome
- ``client``         the REST client, list-then-watch, work queues, controllers, finalizers
- ``names``          labels, annotations and naming rules shared by everything above
"""
