"""A read-only web UI over the run history: server-rendered pages, no JavaScript.

``server`` is the aiohttp application (routes, error pages, request metrics), ``pages``
renders HTML, ``store`` reads the database through ``sql/queries/ui.sql``, ``access``
decides who may see which namespace, and ``words`` says a schedule in plain words.
"""
