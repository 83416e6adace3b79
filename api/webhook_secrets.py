"""``GET /v1/webhook-secret`` and ``POST /v1/webhook-secret/rotate``: the partition's webhook
signing secret (`otherone.store.webhook_secrets`). A token reads and rotates its own partition's
only (a partition's token is its admin's); without tokens (a local server) ``partition`` says
which."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from otherone.api.dependencies import Partition, api_runtime
from otherone.api.problems import ApiError
from otherone.client.store_answers import answered
from otherone.runs import DEFAULT_PARTITION, PARTITION_PATTERN
from otherone.store.webhook_secrets import WebhookSecret as StoredSecret

router = APIRouter()


class WebhookSecret(BaseModel):
    """The secret completion webhooks of a partition are signed with (README "Completion
    webhooks"), and the one it replaced, if any."""

    partition_key: str
    secret: str = Field(description="The HMAC-SHA256 key (the whole text, `whsec_...`).")
    previous_secret: str | None = Field(
        None, description="The secret before the last rotation (accept both while switching)."
    )
    created_at: datetime
    rotated_at: datetime | None = None


PartitionQuery = Annotated[
    str | None,
    Query(
        alias="partition",
        pattern=PARTITION_PATTERN,
        description=f"Without a token: which partition (default: {DEFAULT_PARTITION}).",
    ),
]


@router.get("/webhook-secret", response_model=WebhookSecret, tags=["webhooks"])
async def webhook_secret(
    request: Request, partition: Partition, partition_key: PartitionQuery = None
) -> WebhookSecret:
    """The partition's signing secret (made on first use)."""
    secrets = api_runtime(request).context.store.webhook_secrets
    return _shown(await answered(secrets.get, _chosen(partition, partition_key)))


@router.post("/webhook-secret/rotate", response_model=WebhookSecret, tags=["webhooks"])
async def rotate_webhook_secret(
    request: Request, partition: Partition, partition_key: PartitionQuery = None
) -> WebhookSecret:
    """A new signing secret; the current one becomes ``previous_secret``."""
    secrets = api_runtime(request).context.store.webhook_secrets
    return _shown(await answered(secrets.rotate, _chosen(partition, partition_key)))


def _chosen(partition: str | None, partition_key: str | None) -> str:
    if partition is not None and partition_key not in (None, partition):
        raise ApiError(
            422,
            "invalid_request",
            f"partition: this token is bound to partition '{partition}'",
            field="partition",
        )
    return partition or partition_key or DEFAULT_PARTITION


def _shown(secret: StoredSecret) -> WebhookSecret:
    return WebhookSecret(
        partition_key=secret.partition_key,
        secret=secret.secret,
        previous_secret=secret.previous_secret,
        created_at=secret.created_at,
        rotated_at=secret.rotated_at,
    )
