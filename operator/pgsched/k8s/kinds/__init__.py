"""pgsched's other kinds: ConcurrencyPools, Calendars and NotificationPolicies.

Each becomes rows in the database that the claim, materialization, statuses or the
notification trigger read: ``concurrencypools`` (with ``pool_status``, the pools' gauges
and status), ``calendars``, ``notificationpolicies``, each a ``reconciler.SettingsReconciler``
(the frame they share: finalizer, delete, retry); ``ready`` writes the ``Ready``
condition of the last two.
"""
