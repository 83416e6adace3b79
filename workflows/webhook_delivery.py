"""Completion webhooks in workflows (issue 47): the run's end starts its delivery, and the
delivery workflow retries the POST.

Why a workflow of its own: a run's result must not wait for a receiver (a slow or failing one
would delay every caller of `result()`), and a workflow's activities end with it. So a root
that names a webhook, once its end is stored, starts `WebhookDeliveryWorkflow` as a child with
``parent_close_policy=ABANDON`` and returns its result at once: the delivery lives on alone
(its id `delivery_workflow_id`, in the Web UI under the run's Relationships), and whatever
the receiver does, the run's outcome was decided before. The delivery's one activity is
retried by Temporal (`webhook_retry`); a 4xx other than 408 and 429 is not retried.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from otherone.contracts import (
        ACTIVITY_DELIVER_WEBHOOK,
        WEBHOOK_WORKFLOW_NAME,
        RunRef,
        WebhookDelivered,
        WebhookDelivery,
        WebhookPlan,
        delivery_workflow_id,
    )
    from otherone.contracts.webhooks import (
        WEBHOOK_ATTEMPT_TIMEOUT,
        WEBHOOK_MAX_RETRY,
        WEBHOOK_REFUSED,
    )
    from otherone.webhooks import shown_url


def webhook_retry(plan: WebhookPlan) -> RetryPolicy:
    """The plan's attempts, from ``first_retry`` doubling up to `WEBHOOK_MAX_RETRY`."""
    return RetryPolicy(
        initial_interval=plan.first_retry,
        backoff_coefficient=2.0,
        maximum_interval=max(WEBHOOK_MAX_RETRY, plan.first_retry),
        maximum_attempts=plan.attempts,
        non_retryable_error_types=[WEBHOOK_REFUSED],
    )


@workflow.defn(name=WEBHOOK_WORKFLOW_NAME)
class WebhookDeliveryWorkflow:
    """POST one run's record to its webhook, at least once, within the plan's attempts."""

    @workflow.run
    async def run(self, delivery: WebhookDelivery) -> WebhookDelivered:
        try:
            delivered: WebhookDelivered = await workflow.execute_activity(
                ACTIVITY_DELIVER_WEBHOOK,
                delivery,
                result_type=WebhookDelivered,
                start_to_close_timeout=WEBHOOK_ATTEMPT_TIMEOUT,
                retry_policy=webhook_retry(delivery.webhook),
                summary=f"POST {shown_url(delivery.webhook.url)}",
            )
        except ActivityError as error:
            # Given up: the last attempt stored `webhook_failed` (the run is untouched).
            workflow.logger.warning("webhook of run %s given up: %s", delivery.ref.run_id, error)
            return WebhookDelivered(delivered=False, attempts=delivery.webhook.attempts)
        return delivered


async def start_delivery(ref: RunRef, webhook: WebhookPlan | None) -> None:
    """Start the run's delivery (a root whose end is stored, with a webhook) and return once
    Temporal has it: the run then ends without waiting for it (`ABANDON`)."""
    if webhook is None or ref.parent_run_id is not None:
        return
    delivery_id = delivery_workflow_id(ref.run_id)
    starting = asyncio.ensure_future(
        workflow.start_child_workflow(
            WebhookDeliveryWorkflow.run,
            WebhookDelivery(ref=ref, webhook=webhook, delivery_id=delivery_id),
            id=delivery_id,
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            static_summary=f"webhook of {ref.run_id} → {shown_url(webhook.url)}",
            execution_timeout=_delivery_bound(webhook),
        )
    )
    try:
        # Shielded: a cancellation arriving now (the run is ending anyway) must not turn the
        # run's structured result into a cancelled workflow.
        await asyncio.shield(starting)
    except asyncio.CancelledError:
        pass
    except WorkflowAlreadyStartedError:  # this run's delivery exists (e.g. a reset run)
        workflow.logger.warning("webhook of run %s was started before", ref.run_id)


def _delivery_bound(webhook: WebhookPlan) -> timedelta:
    """Longer than every attempt and wait of the plan can take: a delivery never lingers."""
    waits = timedelta(0)
    wait = webhook.first_retry
    for _ in range(webhook.attempts - 1):
        waits += min(wait, max(WEBHOOK_MAX_RETRY, webhook.first_retry))
        wait *= 2
    return waits + WEBHOOK_ATTEMPT_TIMEOUT * webhook.attempts + timedelta(minutes=5)


__all__ = ["WebhookDeliveryWorkflow", "start_delivery", "webhook_retry"]
