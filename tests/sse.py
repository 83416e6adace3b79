"""Reading Server-Sent Events in tests (what a browser's EventSource parses)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Frame:
    id: int | None
    event: str | None
    data: str
    comment: bool = False

    def json(self) -> Any:
        return json.loads(self.data)


def parse_frame(text: str) -> Frame:
    event_id: int | None = None
    event: str | None = None
    data: list[str] = []
    comment = False
    for line in text.split("\n"):
        if line.startswith(":"):
            comment = True
        elif line.startswith("id: "):
            event_id = int(line[4:])
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
    return Frame(event_id, event, "\n".join(data), comment and not data and event_id is None)


async def read_stream(
    http: httpx.AsyncClient,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    limit: int | None = None,
    comments: bool = False,
) -> tuple[int, list[Frame]]:
    """The status and frames of one event stream, until it ends (or ``limit`` frames)."""
    frames: list[Frame] = []
    async with http.stream("GET", url, headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            return response.status_code, frames
        assert response.headers["content-type"].startswith("text/event-stream")
        buffer = ""
        async for chunk in response.aiter_text():
            buffer += chunk
            while "\n\n" in buffer:
                text, buffer = buffer.split("\n\n", 1)
                frame = parse_frame(text)
                if frame.comment and not comments:
                    continue
                frames.append(frame)
                if limit is not None and len(frames) >= limit:
                    return response.status_code, frames
    return 200, frames
