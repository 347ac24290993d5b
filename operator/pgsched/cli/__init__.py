"""The ``pgsched`` command line."""
