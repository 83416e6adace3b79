"""Compact run references: model and tool inputs carry `RunRef.key`, not the whole `RunRef`.

Those inputs are written into the run's history twice per turn, and the reference (ids, agent,
partition, session, snapshot: ~290 bytes of JSON) was most of them. A worker keeps the
references it has seen (prepare, finish and any full input bring them) by workflow id and key;
one it has not seen (a restarted worker, another worker, a model or tool task queue of its own)
it asks the run for, by `QUERY_RUN_REF`, and checks it against the key. Full references (from
histories written before this) are used as they come.
"""

from __future__ import annotations

from collections import OrderedDict

from temporalio import activity
from temporalio.exceptions import ApplicationError

from otherone.contracts import QUERY_RUN_REF, RunRef
from otherone.errors import FailureCode

#: References kept per worker: one per run in flight is enough (a reference is ~1 KB in
#: memory); more than that many runs at once on one worker cost a query each now and then.
CAPACITY = 8192


class RunRefs:
    """One worker's run references by (workflow id, `RunRef.key`), least recently used out."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._refs: OrderedDict[tuple[str, str], RunRef] = OrderedDict()

    def remember(self, ref: RunRef) -> None:
        """Keep ``ref`` (a run's workflow id is its run id)."""
        self._keep((ref.run_id, ref.key()), ref)

    def _keep(self, entry: tuple[str, str], ref: RunRef) -> None:
        if self.capacity <= 0:
            return
        self._refs[entry] = ref
        self._refs.move_to_end(entry)
        while len(self._refs) > self.capacity:
            self._refs.popitem(last=False)

    async def resolve(self, ref: RunRef | str) -> RunRef:
        """The full reference of the current activity's run."""
        if isinstance(ref, RunRef):
            return ref
        info = activity.info()
        workflow_id = info.workflow_id or ""  # an activity of a run always has one
        entry = (workflow_id, ref)
        known = self._refs.get(entry)
        if known is not None:
            self._refs.move_to_end(entry)
            return known
        found = await self._ask_run(workflow_id, info.workflow_run_id, ref)
        self._keep(entry, found)
        return found

    async def _ask_run(self, workflow_id: str, run_id: str | None, key: str) -> RunRef:
        """The run's reference, from the run itself (its workflow worker answers the query)."""
        handle = activity.client().get_workflow_handle(workflow_id, run_id=run_id)
        try:
            found: RunRef = await handle.query(QUERY_RUN_REF, result_type=RunRef)
        except Exception as error:  # the run's worker is away: a later attempt asks again
            raise ApplicationError(
                f"the run's reference '{key}' could not be read: {type(error).__name__}: {error}",
                type=FailureCode.STORAGE_ERROR.value,
            ) from None
        if found.key() != key:
            # Only a workflow change that alters a history's reference mid-run could do this.
            raise ApplicationError(
                f"the run's reference does not match its key '{key}'",
                type=FailureCode.INVALID_CONFIGURATION.value,
                non_retryable=True,
            )
        return found
