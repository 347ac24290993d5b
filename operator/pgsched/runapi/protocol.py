"""What the run API's server and its client (``pgsched.runner.runapi_client``) agree on."""

from __future__ import annotations

# A request body larger than this is refused (413): the largest a pod sends is a finish
# with an error text the runner bounds to 4,000 characters.
MAX_BODY_BYTES = 64 * 1024
# The longest a cancel long poll waits before answering "no change".
MAX_WAIT_SECONDS = 30.0

HEARTBEAT = "/v1/runs/{run}/heartbeat"
LEASE = "/v1/runs/{run}/lease"
WORKLOAD_ENDED = "/v1/runs/{run}/workload-ended"
FINISH = "/v1/runs/{run}/finish"
