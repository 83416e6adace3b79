"""Migration 0007 scrubs credentials that earlier versions let into stored snapshots, on
SQLite and PostgreSQL; the snapshot still loads under its version (runs in flight keep it)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from alembic import command
from sqlalchemy import insert, select

from otherone.examples import EXAMPLE_CONFIG
from otherone.store import Store
from otherone.store.migrate import alembic_config, head_revision
from otherone.store.schema import snapshots
from otherone.store.scrub import REDACTED, REDACTED_NAME, scrubbed_snapshot_body
from otherone.toml_config import load_config

GITHUB = "ghp_" + "Zq8Wm2Lx7Tb4Rk9Hv3Nc6Pd1Fs5Jg0Ya2Ue"
OPENAI = "sk-proj-" + "Mx4Tq9Lw2Zr7Kb5Hv8Nc3Pd6Fs1Jg0Ya"
HEX = "9f2c" * 10


def leaked_body() -> tuple[str, dict[str, object]]:
    snapshot = load_config(EXAMPLE_CONFIG).snapshot()
    body = json.loads(snapshot.model_dump_json())
    model_id = next(iter(body["models"]))
    agent_id = next(iter(body["agents"]))
    model = body["models"][model_id]
    model["api_key_env"] = OPENAI
    model["base_url"] = f"https://{OPENAI}@llm.example/v1?api-version=2024-10-21&token={HEX}"
    model["other"] = {
        "metadata": {"password": "hunter2-long-pass"},
        "extra_headers": {"X-Auth-Token": HEX, "X-Title": "demo"},
        "top_k": 3,
    }
    body["agents"][agent_id]["metadata"] = {"api_key": OPENAI, "team": "billing"}
    body["mcp_servers"] = {
        "github": {
            "tools_hash": "",
            "tools": [],
            "error": f"env.GITHUB_PERSONAL_ACCESS_TOKEN names '{GITHUB}', which is neither ...",
        }
    }
    return snapshot.version, body


def test_scrubbed_body_keeps_everything_else() -> None:
    _, body = leaked_body()
    scrubbed = scrubbed_snapshot_body(body)
    text = json.dumps(scrubbed)
    for secret in (GITHUB, OPENAI, HEX, "hunter2-long-pass"):
        assert secret not in text
    model = next(iter(scrubbed["models"].values()))
    assert model["api_key_env"] == REDACTED_NAME
    assert model["base_url"] == "https://llm.example/v1?api-version=2024-10-21"
    assert model["other"]["extra_headers"] == {"X-Title": "demo"}
    assert model["other"]["metadata"] == {}
    assert model["other"]["top_k"] == 3
    assert next(iter(scrubbed["agents"].values()))["metadata"]["team"] == "billing"
    error = scrubbed["mcp_servers"]["github"]["error"]
    assert "neither" in error and REDACTED in error


def test_migration_scrubs_stored_snapshots(store_url: str) -> None:
    version, body = leaked_body()
    store = Store.open(store_url, migrate=False)
    try:
        with store.engine.begin() as connection:
            command.upgrade(alembic_config(connection), "0006")
            # As an earlier version wrote it (the writer refuses such a body now).
            connection.execute(
                insert(snapshots).values(
                    version=version, body=json.dumps(body), created_at=datetime.now(UTC)
                )
            )
        assert store.upgrade().after == head_revision()
        with store.engine.begin() as connection:
            stored = connection.execute(select(snapshots.c.body)).scalar_one()
        for secret in (GITHUB, OPENAI, HEX, "hunter2-long-pass"):
            assert secret not in stored
        loaded = store.load_snapshot(version)
        assert loaded is not None and loaded.version == version
    finally:
        store.close()
