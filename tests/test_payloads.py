"""Compact activity payloads (`otherone.payloads`): smaller, and read back as written."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import timedelta

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from otherone.contracts import (
    ModelCallInput,
    PendingEntry,
    RunPlan,
    RunRef,
    ToolCallInput,
    ToolCallSpec,
    ToolOutcome,
)
from otherone.definitions import RuntimeLimits
from otherone.runs import RunOutcome
from otherone.tools import ToolErrorKind
from otherone.worker.app import payload_visiting
from otherone.worker.connection import data_converter

REF = RunRef(
    run_id="run-1",
    root_run_id="run-1",
    parent_run_id=None,
    agent_call_id=None,
    agent_id="agent",
    depth=0,
    partition_key="local",
    session_id="s1",
    snapshot_version="v1",
)
VALUES = [
    ModelCallInput(
        ref=REF,
        model_profile_id="m",
        turn=2,
        pending=(
            PendingEntry(key="k", role="tool", tool_call_id="c", tool_result_of="c"),
            PendingEntry(key="u", role="user", content="", queued=True),
        ),
        result_limit_bytes=1000,
    ),
    ToolCallInput(
        ref=REF, call=ToolCallSpec(id="c", name="t", arguments="{}"), result_limit_bytes=9
    ),
    ToolOutcome(tool_call_id="c", name="t", error_kind=ToolErrorKind.FATAL, result_bytes=0),
    RunPlan(
        snapshot_version="v1",
        agent_id="agent",
        agent_version=1,
        model_profile_id="m",
        model_label="scripted/m",
        limits=RuntimeLimits(),
        max_iterations=3,
        result_limit_bytes=10,
        timeout=timedelta(minutes=5),
        parallel_tool_calls=False,
        tools={},
    ),
]


def test_activity_payloads_leave_defaults_out_and_read_back_equal() -> None:
    compact, full = data_converter().payload_converter, pydantic_data_converter.payload_converter
    for value in VALUES:
        small, large = compact.to_payload(value), full.to_payload(value)
        assert small is not None and large is not None
        assert len(small.data) < len(large.data), type(value).__name__
        assert b"null" not in small.data
        # Read back by either converter (a worker of the previous release, too), and old full
        # payloads by the compact one: the same value.
        assert compact.from_payload(small, type(value)) == value
        assert full.from_payload(small, type(value)) == value
        assert compact.from_payload(large, type(value)) == value


def test_other_payloads_keep_every_field() -> None:
    payload = data_converter().payload_converter.to_payload(RunOutcome.COMPLETED)
    assert payload is not None and payload.data == b'"completed"'
    ref = data_converter().payload_converter.to_payload(REF)
    assert ref is not None and b'"parent_run_id":null' in ref.data


def test_the_compacted_types_are_looked_up_once_the_contracts_are_loaded() -> None:
    """`compact_types` finds the contract models without importing them (this test module has)."""
    from otherone.contracts import COMPACT_PAYLOAD_TYPES
    from otherone.payloads import compact_types

    assert compact_types() == COMPACT_PAYLOAD_TYPES
    assert ModelCallInput in COMPACT_PAYLOAD_TYPES and RunRef not in COMPACT_PAYLOAD_TYPES


class _NowhereDriver(StorageDriver):
    """An external storage driver that is never asked for anything here."""

    def name(self) -> str:
        return "nowhere"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        raise AssertionError("not called")

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        raise AssertionError("not called")


def test_workers_walk_payloads_without_a_task_each_unless_payloads_are_stored_elsewhere() -> None:
    """No external storage: one walk, no asyncio task per payload; a user's converter with
    external storage keeps the SDK's concurrent storage operations."""
    assert payload_visiting(data_converter()) == {
        "max_workflow_task_external_storage_concurrency": 1
    }
    stored = dataclasses.replace(
        data_converter(), external_storage=ExternalStorage(drivers=[_NowhereDriver()])
    )
    assert payload_visiting(stored) == {}
