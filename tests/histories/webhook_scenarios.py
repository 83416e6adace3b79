"""Replay scenarios of completion webhooks (issue 47): a root that ends by starting its
abandoned delivery, and the delivery itself (one attempt refused with a 503, then delivered)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.contracts import WebhookDelivered, delivery_workflow_id
from otherone.definitions import RuntimePolicy
from tests.harness import agent_env, scripted_config
from tests.webhook_receiver import Receiver, receiving

_FAST = RuntimePolicy(webhook_attempts=3, webhook_first_retry=timedelta(seconds=1))


async def _delivered_run(client: Client, task_queue: str, tmp: Path) -> str:
    """A root run with a webhook, whose receiver fails once; its run id once delivered."""
    config = scripted_config({"agent": ["Done."]}, policy=_FAST)
    with receiving(Receiver(statuses=(503, 200))) as receiver:
        async with agent_env(client, task_queue, config, tmp) as env:
            request = build_request(entry_agent="agent", input="hi", webhook=receiver.url)
            result = await env.agents.run(request)
            delivery = client.get_workflow_handle(
                delivery_workflow_id(result.run_id), result_type=WebhookDelivered
            )
            delivered = await delivery.result()
    assert delivered.delivered and delivered.attempts == 2, delivered
    return result.run_id


async def webhook(client: Client, task_queue: str, tmp: Path) -> str:
    """The root's history: it ends by starting its delivery as an abandoned child."""
    return await _delivered_run(client, task_queue, tmp)


async def webhook_delivery(client: Client, task_queue: str, tmp: Path) -> str:
    """The delivery's history: an attempt answered 503, retried, then delivered."""
    return delivery_workflow_id(await _delivered_run(client, task_queue, tmp))
