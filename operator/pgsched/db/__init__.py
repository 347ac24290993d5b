"""Database access: connections, migrations and the named SQL queries."""
