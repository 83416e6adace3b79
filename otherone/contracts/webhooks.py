"""Completion webhooks: what a root run's end hands to its delivery (`otherone.webhooks`)."""

from __future__ import annotations

from datetime import timedelta

from otherone.contracts.refs import RunRef, _Contract

#: The workflow that delivers one run's webhook (started by the run, abandoned: the run's
#: result never waits for the receiver).
WEBHOOK_WORKFLOW_NAME = "OtheroneWebhookDelivery"
#: The activity that POSTs it (retried by Temporal with backoff).
ACTIVITY_DELIVER_WEBHOOK = "otherone.deliver_webhook"
#: The error type of an attempt the receiver refused for good (a 4xx but 408 and 429, a
#: redirect): not retried.
WEBHOOK_REFUSED = "webhook_refused"
#: The longest wait between two attempts.
WEBHOOK_MAX_RETRY = timedelta(minutes=5)
#: One attempt's bound (connect, send, the receiver's answer).
WEBHOOK_ATTEMPT_TIMEOUT = timedelta(seconds=30)


def delivery_workflow_id(run_id: str) -> str:
    """The delivery's workflow id, and its ``Otherone-Delivery-Id``: one per run (a run id is
    used once), the same for every attempt. Not nested under the run's id (``<run>/...`` is
    where its children's ids live)."""
    return f"webhook:{run_id}"


class WebhookPlan(_Contract):
    """A root run's webhook, resolved when it was prepared: the request's, else its agent's."""

    url: str
    attempts: int = 8
    first_retry: timedelta = timedelta(seconds=2)


class WebhookDelivery(_Contract):
    """Input of the delivery workflow and of each attempt."""

    ref: RunRef
    webhook: WebhookPlan
    delivery_id: str


class WebhookDelivered(_Contract):
    """How a delivery ended: the receiver's status code (None: no answer) and the attempts."""

    delivered: bool
    status_code: int | None = None
    attempts: int = 1
