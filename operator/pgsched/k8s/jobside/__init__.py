"""The Job side: a claimed run becomes a batch/v1 Job, and the Job's life becomes the run's.

``jobs`` builds the Job (pure) under the jobTemplate policy of ``jobpolicy``;
``launcher`` creates it and its lease Secret, idempotently, telling Pod Security warnings
(``podsecurity``); ``outcomes`` reads a finished Job into the run's end, which
``jobevents`` (the Job watch) and ``resync`` (what the watch missed) record; ``starts``
records when a workload started; ``verdicts`` settles runs whose heartbeats stopped from
their Jobs; ``cleanup`` deletes the Jobs of ended runs.
"""
