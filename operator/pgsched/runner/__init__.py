"""The in-pod side of a run: heartbeats, cancellation, the SDK runner and the sidecar.

Everything here runs inside job pods with the narrow job database role, and talks to the
database only through the fenced lease functions (``pgsched.engine.lease``):

- ``heartbeat``: the background heartbeat loop both programs share;
- ``sdk_runner``: ``pgsched run``, which executes a Python job kind (``pgsched.sdk``);
- ``sidecar``: ``pgsched heartbeat``, the native sidecar next to arbitrary containers;
- ``settings``: the environment contract the operator fills in for both.
"""
