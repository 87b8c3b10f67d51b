"""The SQL plumbing every store is written on: one SQLite file (WAL), PostgreSQL pools and
migrations, and store operations written once for both dialects."""

__all__: list[str] = []
