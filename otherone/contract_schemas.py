"""JSON Schemas of the workflow contract (docs/workflow-contract.md), generated from the models.

    python -m otherone.contract_schemas          # rewrite docs/schemas/*.schema.json
    python -m otherone.contract_schemas --check  # exit 1 if a checked-in file is stale

The files let a client in any language (or `temporal workflow start --input`) build the
workflow's input, signal and update payloads and read its result without our Python package;
tests/test_workflow_contract.py fails when a model changes and its file was not regenerated.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from otherone.contracts import CallAgentInput, RunInput, UserMessages
from otherone.runs import AgentRunResult, RunRecord

#: File name (under docs/schemas/) → the model it describes.
SCHEMAS: dict[str, type[BaseModel]] = {
    "run-input.schema.json": RunInput,
    "user-messages.schema.json": UserMessages,
    "call-agent.schema.json": CallAgentInput,
    "agent-run-result.schema.json": AgentRunResult,
    "run-record.schema.json": RunRecord,
}
SCHEMA_DIR = Path(__file__).resolve().parent.parent / "docs" / "schemas"


def schema_text(model: type[BaseModel]) -> str:
    """The model's JSON Schema as the checked-in file holds it (stable key order, newline)."""
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **model.model_json_schema(mode="validation"),
    }
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def stale(directory: Path = SCHEMA_DIR) -> list[str]:
    """Names of the files that differ from (or are missing for) the current models."""
    return [
        name
        for name, model in SCHEMAS.items()
        if not (directory / name).is_file()
        or (directory / name).read_text(encoding="utf-8") != schema_text(model)
    ]


def write(directory: Path = SCHEMA_DIR) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, model in SCHEMAS.items():
        (directory / name).write_text(schema_text(model), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m otherone.contract_schemas")
    parser.add_argument("--check", action="store_true", help="fail if a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        outdated = stale()
        for name in outdated:
            print(f"stale: docs/schemas/{name} (run python -m otherone.contract_schemas)")
        return 1 if outdated else 0
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
