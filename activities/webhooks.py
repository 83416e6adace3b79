"""`deliver_webhook`: one attempt to POST a run's record to its webhook, signed with the
partition's secret (`otherone.webhooks`); every attempt's end is an event of the run.

The body is the run's stored record with its output's value (what ``GET /v1/runs/{id}``
answers), scrubbed like every stored record. The activity raises to be retried (network
errors, 5xx, 408, 429, a record not stored yet) and raises non-retryable on a receiver's
refusal (another 4xx, or a redirect: a signed POST is not sent elsewhere); Temporal keeps the
delivery's attempts and backoff (`otherone.workflows.webhook_delivery.webhook_retry`).
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from otherone.activities.shared import ActivityContext
from otherone.contracts import WebhookDelivered, WebhookDelivery
from otherone.contracts.webhooks import WEBHOOK_ATTEMPT_TIMEOUT, WEBHOOK_REFUSED
from otherone.redaction import redact, remember
from otherone.runs import RunRecord
from otherone.store import Store
from otherone.store.records import EVENT_KEY, event_key
from otherone.webhooks import (
    DELIVERY_ID_HEADER,
    EVENT_HEADER,
    RUN_ENDED,
    RUN_ID_HEADER,
    SIGNATURE_HEADER,
    shown_url,
    signature_header,
)

#: One POST's own bound: below the attempt's timeout, so a hanging receiver is an attempt
#: that failed (and says so in an event), not one Temporal timed out.
HTTP_TIMEOUT = WEBHOOK_ATTEMPT_TIMEOUT.total_seconds() * 2 / 3
#: How much of a refusing receiver's answer an event quotes (redacted).
QUOTED_ANSWER_CHARS = 200
_RETRIED_4XX = (408, 429)


async def deliver_webhook(context: ActivityContext, delivery: WebhookDelivery) -> WebhookDelivered:
    ref, attempt = delivery.ref, activity.info().attempt
    record = await context.io(_ended_record, context.store, ref.partition_key, ref.run_id)
    secret = await context.io(context.store.webhook_secrets.get, ref.partition_key)
    remember(secret.secret)  # never in a log or error of this worker
    body = json.dumps(record.model_dump(mode="json"), separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "otherone-webhooks",
        SIGNATURE_HEADER: signature_header(secret.secret, int(time.time()), body),
        DELIVERY_ID_HEADER: delivery.delivery_id,
        EVENT_HEADER: RUN_ENDED,
        RUN_ID_HEADER: ref.run_id,
    }
    try:
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False) as http:
            answer = await http.post(delivery.webhook.url, content=body, headers=headers)
    except httpx.HTTPError as error:
        problem = f"no answer ({type(error).__name__})"
        await _failed(context, delivery, attempt, None, problem, retrying=True)
        raise _attempt_failed(delivery, problem, retryable=True) from None
    status = answer.status_code
    if 200 <= status < 300:
        await _emit(context, delivery, attempt, "webhook_delivered", status_code=status)
        return WebhookDelivered(delivered=True, status_code=status, attempts=attempt)
    retryable = status >= 500 or status in _RETRIED_4XX
    problem = f"answered {status}: {redact(answer.text[:QUOTED_ANSWER_CHARS])}"
    await _failed(context, delivery, attempt, status, problem, retrying=retryable)
    raise _attempt_failed(delivery, problem, retryable=retryable)


def _ended_record(store: Store, partition_key: str, run_id: str) -> RunRecord:
    """The run's stored end, its output's value read back from its artifact."""
    record = store.get_run_record(partition_key, run_id)
    if record is None or not record.status.is_terminal:
        raise ApplicationError(f"run {run_id}: its end is not stored yet", type="run_not_ended")
    if record.output is not None:
        record = record.model_copy(update={"output": store.resolve_output(record.output)})
    return record


async def _failed(
    context: ActivityContext,
    delivery: WebhookDelivery,
    attempt: int,
    status: int | None,
    problem: str,
    *,
    retrying: bool,
) -> None:
    retrying = retrying and attempt < delivery.webhook.attempts
    await _emit(
        context,
        delivery,
        attempt,
        "webhook_failed",
        status_code=status,
        error=problem,
        retrying=retrying,
    )


async def _emit(
    context: ActivityContext, delivery: WebhookDelivery, attempt: int, kind: str, **fields: Any
) -> None:
    """One event of the run (keyed by attempt: a re-stored attempt is stored once)."""
    ref = delivery.ref
    body = {
        "type": kind,
        "delivery_id": delivery.delivery_id,
        "url": shown_url(delivery.webhook.url),
        "attempt": attempt,
        "max_attempts": delivery.webhook.attempts,
        **fields,
        EVENT_KEY: event_key(ref.run_id, "webhook", str(attempt)),
    }
    await context.emit(ref, body)


def _attempt_failed(
    delivery: WebhookDelivery, problem: str, *, retryable: bool
) -> ApplicationError:
    return ApplicationError(
        f"webhook {shown_url(delivery.webhook.url)} {problem}",
        type="webhook_failed" if retryable else WEBHOOK_REFUSED,
        non_retryable=not retryable,
        # A receiver's answer, not our bug: logged at debug level, not as a traceback.
        category=ApplicationErrorCategory.BENIGN,
    )
