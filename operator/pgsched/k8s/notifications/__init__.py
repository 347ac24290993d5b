"""Delivery of notifications to their receivers (Webhook, Slack, CloudEvents).

The database produces them: the notification trigger derives one row per matching target
from the run-events outbox (``spec.notify`` checks the targets it reads at apply), and
``engine.notifications`` claims and settles those rows. Here they leave: ``notifier`` is
the publisher thread's delivery service (claims, retries, verdicts, per-namespace and
per-address bounds), ``destinations`` where a notification may go (resolved within the
attempt's deadline, refused unless public or allowed), ``receivers`` what it looks like on
the wire and one bounded POST. A namespace's default targets come from its
NotificationPolicy (``k8s.kinds.notificationpolicies``).
"""
