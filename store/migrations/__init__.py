"""Alembic migrations of our tables (run by `otherone.store.migrate`, not imported by the
runtime)."""
