"""pgsched: cron, RRULE and one-shot jobs on Kubernetes, scheduled through Postgres.

The package is layered; each layer only imports the ones listed after it:

- ``pgsched.cli``       command-line entry points (``pgsched …``)
- ``pgsched.k8s``       the operator: watches, the Job launcher, statuses and Events
- ``pgsched.runner``    in-pod side: heartbeat sidecar and the job SDK runner
- ``pgsched.engine``    the tick: leader election, materialize, reap, dispatch, retry
- ``pgsched.schedule``  pure recurrence arithmetic (cron, RRULE, one-shot, DST rules)
- ``pgsched.db``        connections, migrations and the named SQL queries
"""

__version__ = "0.1.0"
