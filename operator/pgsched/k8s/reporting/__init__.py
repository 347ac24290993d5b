"""What users see in Kubernetes: ScheduledJob statuses and Events.

``publisher`` drains the run-events outbox into Kubernetes Events and status patches
(and hands the Jobs of ended runs to ``jobside.cleanup``); ``status`` renders a
ScheduledJob's status from the database (pure). Notifications sent outside the cluster
are delivered by ``k8s.notifications``.
"""
