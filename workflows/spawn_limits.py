"""The waits and sizes of `agent.spawn`'s workflow side (`otherone.workflows.spawns`).

A module of its own, passed through Temporal's sandbox (`otherone.worker.app.PASSTHROUGH_MODULES`)
and read at use time (``spawn_limits.X``), so that one value serves the worker and every
sandboxed copy of the workflow code: a test that shortens one reaches the runs it starts.
"""

from __future__ import annotations

from datetime import timedelta

#: How long a run that ends waits for the spawned children it cancelled to stop.
SPAWN_CANCEL_GRACE = timedelta(seconds=30)
#: At most this much of results in one `agent.await` answer (one result always fits: outputs
#: above `inline_payload_bytes`, at most 1 MB, travel as artifacts).
AWAIT_RESULT_BYTES = 1024 * 1024
#: How long `agent.cancel` waits for the child to stop before answering "cancelling".
CANCEL_WAIT = timedelta(seconds=30)
#: How often a wait on children started in an earlier history (carried over continue-as-new)
#: asks Temporal whether they ended without a signal (terminated from outside).
CARRIED_POLL = timedelta(seconds=15)
