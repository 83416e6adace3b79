"""`GET /v1/usage`: what model calls used and cost, summed by partition, agent, model profile
and UTC day (`otherone.store.spending`). A token sees its own partition only."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from otherone.api.dependencies import Partition, api_runtime
from otherone.api.problems import ApiError
from otherone.client.store_answers import answered
from otherone.runs import PARTITION_PATTERN
from otherone.store.spending import GROUPINGS, parse_grouping

router = APIRouter()


class UsageRow(BaseModel):
    """One group's sums; the keys it was not grouped by are absent."""

    partition_key: str | None = None
    agent_id: str | None = None
    model_profile_id: str | None = None
    day: str | None = Field(default=None, description="A UTC day, `YYYY-MM-DD`.")
    calls: int
    input_tokens: int = Field(description="Every prompt token, cached or not.")
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost: str = Field(
        description="US dollars, an exact decimal: what the priced calls cost (a lower bound "
        "when `unpriced_calls` > 0)."
    )
    unpriced_calls: int = Field(
        0,
        description="Of `calls`, those of a model profile without prices (no `prices` and a "
        "model the bundled table does not know): their cost is unknown, not in `cost`.",
    )


class Usage(BaseModel):
    rows: list[UsageRow]
    total: UsageRow = Field(description="The sums of all the rows.")


@router.get("/usage", response_model=Usage, response_model_exclude_none=True, tags=["usage"])
async def usage(
    request: Request,
    partition: Partition,
    partition_key: Annotated[
        str | None,
        Query(
            alias="partition",
            pattern=PARTITION_PATTERN,
            description="Without a token: one partition (default: all of them).",
        ),
    ] = None,
    by: Annotated[
        str,
        Query(
            max_length=64,
            description=f"What to group by: one or more of {', '.join(GROUPINGS)}, "
            "comma-separated.",
        ),
    ] = "agent,model,day",
    since: Annotated[date | None, Query(description="From this UTC day on.")] = None,
    until: Annotated[date | None, Query(description="Up to this UTC day, included.")] = None,
) -> Usage:
    """Tokens (cache tokens apart), model calls and cost of the caller's partition (with a
    token) or of any partition (the operator's, without one), summed by ``by``."""
    if partition is not None and partition_key not in (None, partition):
        raise ApiError(
            422,
            "invalid_request",
            f"partition: this token is bound to partition '{partition}'",
            field="partition",
        )
    try:
        grouping = parse_grouping(by)
    except ValueError as error:
        raise ApiError(422, "invalid_request", str(error), field="by") from None
    spending = api_runtime(request).context.store.spending
    chosen = partition or partition_key
    rows = await answered(
        spending.usage, partition_key=chosen, group_by=grouping, since=since, until=until
    )
    total = await answered(
        spending.usage, partition_key=chosen, group_by=(), since=since, until=until
    )
    empty = {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0}
    return Usage(
        rows=[UsageRow.model_validate(row.as_json()) for row in rows],
        total=UsageRow.model_validate(
            total[0].as_json() if total else {**empty, "cache_write_tokens": 0, "cost": "0"}
        ),
    )
