"""An incremental Server-Sent Events parser (the WHATWG event-stream format).

Why our own: the network cuts a stream wherever it likes — in the middle of an event, of a line,
of a ``\\r\\n`` pair or of a multi-byte UTF-8 character — and the seed's adapters parsed each read
on its own and lost the events split across reads. `SSEDecoder` keeps everything that is not yet
a whole line and everything that is not yet a whole event, so the events it returns are the same
for any chunking of the same bytes.

Rules implemented (https://html.spec.whatwg.org/multipage/server-sent-events.html):

* lines end with ``\\r\\n``, ``\\n`` or ``\\r``; a UTF-8 BOM at the very start is skipped;
* ``:comment`` lines (keep-alives) are ignored; ``field: value`` loses one leading space;
  a line without a colon is a field with an empty value;
* ``data`` lines are joined with ``\\n``; a blank line dispatches the event; an event without
  data is not dispatched; ``event`` names it (default ``message``); ``id`` and ``retry`` are kept;
* bytes after the last blank line when the stream ends are an incomplete event and are dropped.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BOM = "\ufeff"


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Feed it bytes as they arrive; it returns the events that became complete."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._started = False
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Parse ``chunk``; return every event completed by it (possibly none)."""
        return self._lines(self._text.decode(chunk))

    def close(self) -> list[ServerSentEvent]:
        """The stream ended: finish a held line, drop an event that never got its blank line."""
        events = self._lines(self._text.decode(b"", final=True))
        if self._pending.endswith("\r"):
            events += self._line(self._pending[:-1])
        self._pending = ""
        self._data, self._event = [], ""
        return events

    def _lines(self, text: str) -> list[ServerSentEvent]:
        if not self._started and text:
            self._started = True
            text = text.removeprefix(_BOM)
        buffer = self._pending + text
        # A trailing "\r" may be the first half of a "\r\n" split across reads: hold it back
        # until the next byte (or the end of the stream) decides.
        held = buffer.endswith("\r")
        *lines, rest = _LINE_BREAK.split(buffer[:-1] if held else buffer)
        self._pending = rest + "\r" if held else rest
        events: list[ServerSentEvent] = []
        for line in lines:
            events += self._line(line)
        return events

    def _line(self, line: str) -> list[ServerSentEvent]:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return []
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        return []

    def _dispatch(self) -> list[ServerSentEvent]:
        if not self._data:
            self._event = ""
            return []
        event = ServerSentEvent(
            data="\n".join(self._data),
            event=self._event or "message",
            id=self._id,
            retry=self._retry,
        )
        self._data, self._event = [], ""
        return [event]


async def iter_sse(chunks: AsyncIterable[bytes]) -> AsyncIterator[ServerSentEvent]:
    """The events of a byte stream, whatever its chunking."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.close():
        yield event
