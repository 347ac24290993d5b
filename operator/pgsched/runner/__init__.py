"""The in-pod side of a run: heartbeats, cancellation, the SDK runner and the sidecar.

Everything here runs inside job pods, which hold no database session: they speak for their
run only through the operator's run API (``runapi_client``, docs/run-api.md), with the run's
lease as their credential:

- ``runapi_client``: the HTTPS client of the run API;
- ``heartbeat``: the background heartbeat loop both programs share;
- ``sdk_runner``: ``pgsched run``, which executes a Python job kind (``pgsched.sdk``);
- ``sidecar``: ``pgsched heartbeat``, the native sidecar next to arbitrary containers;
- ``settings``: the environment contract the operator fills in for both.
"""
