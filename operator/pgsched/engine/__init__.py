"""The scheduling engine: everything that happens to definitions and runs in Postgres.

One module per activity, as the tick performs them:

- ``leader``       per-tick leader election with a session advisory lock
- ``materialize``  due definitions become run rows, ``next_run_at`` advanced in the same commit
- ``reap``         set-based UPDATEs that fail orphaned runs and skip runs past their deadline
- ``settle``       consequences of terminal runs: retries as new rows, failure streaks
- ``dispatch``     claim due runs with SKIP LOCKED under per-definition caps, then launch them
- ``tick``         the loop that runs the phases above and never dies

and the operations other components call: ``definitions`` (upsert/delete/suspend),
``runs`` (run now, cancel, history), ``lease`` (heartbeat/finish for the job side).
No module here knows about Kubernetes; launching goes through ``launcher.Launcher``.
"""
