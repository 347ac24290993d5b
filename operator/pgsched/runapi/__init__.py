"""The run API: what job pods say about their runs, and hear, over HTTPS instead of SQL.

Served by every operator replica (docs/run-api.md): ``server`` answers the requests,
``leases`` checks a request's lease in memory, ``limits`` keeps each namespace's budget,
``store`` calls the lease functions on the API's own pool, ``stops`` answers cancel long
polls from one LISTEN, ``presence`` tells the reaper when the API was served.
"""
