"""Benchmarks of Otherone against the Temporal floor and the other Temporal agent integrations.

`python -m bench.run` (what `make bench` calls) starts one dev server and runs every contender in
its own process against it. Only `bench.common` is shared by all contenders, so it imports nothing
but the standard library and `temporalio` (the peers run in `bench/.venv-peers`).
"""
