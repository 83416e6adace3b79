"""Otherone on Temporal: shared domain types and configuration."""
