"""Migration scripts, one revision each, in order (0001, 0002, ...)."""
