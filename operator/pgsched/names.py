"""Name patterns shared by the spec, the SDK and the runner (ground floor: imports nothing).

A ScheduledJob names a job kind (``spec.job.kind``) that an image registers with the SDK
and the runner is told to run; retry lists name failure reasons, which for SDK kinds are
exception class names; the runner imports user modules by dotted name. Each pattern is
written once, here, so the three places that check a name agree on what one is.
"""

from __future__ import annotations

import re

# A job kind name: lowercase letters, digits, '.', '_' or '-', at most 63 characters.
JOB_KIND = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
# A dotted Python name: a reason (an exception class, maybe qualified) or a module path.
# A Kubernetes object name (DNS-1123 subdomain): what spec.pool names.
OBJECT_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
DOTTED_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# A Kubernetes object name (DNS-1123 subdomain), as spec.after names a ScheduledJob.
OBJECT_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
