"""Process settings from environment variables (prefix ``OTHERONE_``) or a ``.env`` file."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_TASK_QUEUE = "otherone"
DEFAULT_DATA_DIR = Path(".otherone")


class Settings(BaseSettings):
    """Where the worker and the CLI find Temporal, the configuration and the database."""

    model_config = SettingsConfigDict(env_prefix="OTHERONE_", env_file=".env", extra="ignore")

    temporal_address: str = Field("127.0.0.1:7233", description="Temporal frontend host:port.")
    namespace: str = Field("default", description="Temporal namespace.")
    task_queue: str = Field(
        DEFAULT_TASK_QUEUE, description="Task queue of agent workflows and activities."
    )
    config: Path = Field(
        Path("otherone.toml"), description="Path of the runtime configuration (TOML)."
    )
    data_dir: Path = Field(
        DEFAULT_DATA_DIR, description="Directory for the dev server's and store's files."
    )
    database_url: str | None = Field(
        None, description="SQLAlchemy URL of our store; default: SQLite file in data_dir."
    )
    ui_port: int = Field(8233, description="Port of the Temporal Web UI started by `otherone dev`.")
    temporal_port: int = Field(
        7233, description="Port of the dev server started by `otherone dev`."
    )
    max_concurrent_activities: int = Field(64, gt=0, description="Activity slots of one worker.")

    def store_url(self) -> str:
        from store import default_database_url

        return self.database_url or default_database_url(self.data_dir)
