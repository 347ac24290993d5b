"""The operator process: its wiring, settings and servers.

``operator`` starts everything (the watches and their workers, the tick and publisher
threads); ``settings`` reads and validates ``PGSCHED_*``; ``health`` serves ``/healthz``;
``gauges`` refreshes the database gauges the metrics server exports; ``webhook`` serves
the validating admission webhook with kopf, and ``admission`` decides what it refuses.
"""
