"""Recorded runs with images (issue 44): the input's and a sent message's parts travel as
references, so these histories replay the workflow code that carries them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from otherone.client.agent_client import build_request
from otherone.definitions import AgentDefinition
from otherone.parts import FilePart, ImagePart, TextPart
from otherone.runs import AgentCallRequest, AgentRunRequest, InputMessage
from tests.harness import agent_env, scripted_config
from tests.providers import RecordingProvider

#: A PNG and a PDF header: what the client's media-type check reads.
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
PDF = b"%PDF-1.4\n%%EOF\n"


async def image_input(client: Client, task_queue: str, tmp: Path) -> str:
    """A root input with an image (bytes), an image by URL and a PDF, then a message with an
    image sent while the model answers."""
    provider = RecordingProvider()
    gate = provider.gate("looker", 1)
    config = scripted_config({"looker": ["a cat", "a dog"]})
    content = (
        TextPart(text="what is this?"),
        ImagePart.from_bytes(PNG),
        ImagePart.from_url("https://example.com/cat.png"),
        FilePart.from_bytes(PDF).model_copy(update={"filename": "report.pdf"}),
    )
    request = AgentRunRequest(
        entry_agent="looker", input=(InputMessage(role="user", content=content),)
    )
    async with agent_env(client, task_queue, config, tmp, providers={"scripted": provider}) as env:
        handle = await env.agents.start(request)
        await asyncio.wait_for(provider.started.wait(), 10)
        await handle.send_message([(TextPart(text="and this?"), ImagePart.from_bytes(PNG))])
        await handle.record()
        gate.set()
        await handle.result()
    return handle.run_id


async def image_agent_call(client: Client, task_queue: str, tmp: Path) -> str:
    """A trusted agent call whose request carries an image: the child's input holds it."""
    provider = RecordingProvider()
    gate = provider.gate("caller", 1)
    agents = [
        AgentDefinition(id="caller", description="calls", callable_agents=["looker"]),
        AgentDefinition(id="looker", description="looks"),
    ]
    config = scripted_config({"caller": ["done"], "looker": ["a cat"]}, agents=agents)
    async with agent_env(client, task_queue, config, tmp, providers={"scripted": provider}) as env:
        handle = await env.agents.start(build_request(entry_agent="caller", input="go"))
        await asyncio.wait_for(provider.started.wait(), 10)
        call = AgentCallRequest(target="looker", task="look", parts=(ImagePart.from_bytes(PNG),))
        await env.agents.call_agent(handle.run_id, "c1", call)
        gate.set()
        await handle.result()
    return handle.run_id
