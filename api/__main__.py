"""``python -m otherone.api``: serve the API with the OTHERONE_* settings;
``python -m otherone.api --openapi`` prints the OpenAPI document (docs/openapi.json)."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from pydantic import ValidationError

from otherone.errors import OtheroneError


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--openapi"]:
        from otherone.api import openapi_schema

        print(json.dumps(openapi_schema(), indent=2, sort_keys=True))
        return 0
    if args:
        print("usage: python -m otherone.api [--openapi]", file=sys.stderr)
        return 2
    from otherone.api.server import serve
    from otherone.worker.settings import Settings

    try:
        asyncio.run(serve(Settings()))
    except ValidationError as error:
        first = error.errors()[0]
        print(f"error: OTHERONE_{str(first['loc'][0]).upper()}: {first['msg']}", file=sys.stderr)
        return 2
    except OtheroneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without the interpreter's teardown, where the Temporal SDK's runtime can abort the
    # process (temporalio/sdk-python#300, ../shared/TEMPORAL-NOTES.md): flushed, then _exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
