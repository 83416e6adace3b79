"""Alembic migrations of our tables (run by `store.migrate`, not imported by the runtime)."""
