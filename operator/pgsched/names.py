"""Names shared by layers that may not import each other (ground floor: imports nothing).

A ScheduledJob names a job kind (``spec.job.kind``) that an image registers with the SDK
and the runner is told to run; retry lists name failure reasons, which for SDK kinds are
exception class names; the runner imports user modules by dotted name. Each pattern is
written once, here, so the three places that check a name agree on what one is. The
operator's Job and the sidecar inside it agree the same way on a file name.
"""

from __future__ import annotations

import re

# A job kind name: lowercase letters, digits, '.', '_' or '-', at most 63 characters.
JOB_KIND = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
# A dotted Python name: a reason (an exception class, maybe qualified) or a module path.
DOTTED_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# A Kubernetes object name (DNS-1123 subdomain): what spec.after and spec.pool name.
OBJECT_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")

# The file the heartbeat sidecar creates next to the cancel file (in the pod's shared
# volume) once its SIGTERM handler is installed; the Job's postStart hook waits for it, so
# kubelet starts the workload only when the sidecar will hear the SIGTERM that follows it.
HEARTBEAT_LISTENING_FILE = "heartbeat-listening"

# The web UI's settings, read by the operator's settings and by `pgsched ui`: the audience
# visitors' tokens are issued for (kubectl create token NAME --audience pgsched-ui), and
# when its session cookie is Secure (pgsched.ui.server says what each value means).
UI_AUDIENCE = "pgsched-ui"
UI_COOKIE_SECURE = ("auto", "always", "never")
