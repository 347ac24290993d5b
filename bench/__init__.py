"""pgsched's benchmarks: every figure next to a baseline measured in the same run.

``python -m bench`` runs the issue-2 suite; ``python -m bench <name>`` one benchmark;
``bench/README.md`` has the commands, the numbers and the caveats. The benchmarks start
their own throwaway PostgreSQL server (like the database tests) and never touch anything
else.
"""
