"""ScheduledJobs: what users apply becomes a definition in the database, and back.

``scheduledjobs`` is the sync half (spec checked, definition upserted, request annotations
carried out, deletion), ``scheduledjob_writer`` the writer half (finalizer, status,
Events); ``commands`` reads and carries out the request annotations (run-now, cancel,
backfill, resume); ``suspension`` the suspend-reason annotation.
"""
