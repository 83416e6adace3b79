"""``POST /v1/runs/upload``: start a run from a ``multipart/form-data`` form, its images and
files uploaded as they are (no base64): ``agent``, ``text``, optional ``session_id``, and any
number of ``image`` and ``file`` (PDF) file fields. The parts are checked and stored like the
JSON start's (`otherone.part_storage`); the body limit of every request applies.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from pydantic import BaseModel

from otherone.api.dependencies import Agents, Partition
from otherone.api.problems import ApiError
from otherone.client.agent_client import build_request
from otherone.errors import InvalidRequestError

router = APIRouter()


class UploadedRun(BaseModel):
    run_id: str
    events_url: str
    result_url: str


@router.post("/runs/upload", status_code=201, response_model=UploadedRun, tags=["runs"])
async def start_run_with_uploads(
    request: Request,
    agents: Agents,
    partition: Partition,
    agent: Annotated[str, Form(description="the entry agent")],
    text: Annotated[str, Form(description="the user message")],
    session_id: Annotated[str | None, Form(description="continue this session")] = None,
    image: Annotated[
        list[UploadFile] | None,
        File(description="images (PNG, JPEG, GIF, WebP)"),
    ] = None,
    file: Annotated[list[UploadFile] | None, File(description="documents (PDF)")] = None,
) -> UploadedRun:
    """Start a root run whose user message is ``text`` and the uploaded images and files."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for upload in image or []:
        parts.append({"type": "image", "data": await _base64(upload)})
    for upload in file or []:
        parts.append({"type": "file", "data": await _base64(upload), "filename": upload.filename})
    fields: dict[str, Any] = {
        "entry_agent": agent,
        "input": [{"role": "user", "content": parts}],
    }
    if session_id is not None:
        fields["session"] = {"session_id": session_id}
    if partition is not None:
        fields["runtime_context"] = {"partition_key": partition}
    try:
        run = build_request(**fields)
    except InvalidRequestError as error:
        raise ApiError(422, "invalid_request", str(error), field=error.field) from None
    handle = await agents.start(run)
    return UploadedRun(
        run_id=handle.run_id,
        events_url=str(request.url_for("run_events", run_id=handle.run_id)),
        result_url=str(request.url_for("run_result", run_id=handle.run_id)),
    )


async def _base64(upload: UploadFile) -> str:
    return base64.b64encode(await upload.read()).decode("ascii")
