"""Each partition's webhook signing secret (issue 47): made on first use, read by the delivering
worker and by the partition's admin (``otherone webhook-secret``, ``GET /v1/webhook-secret``),
rotated on demand (the replaced one is kept, with when it was replaced, for receivers that accept
both during a grace period of their choosing).

Kept as plain text in the store, like the rest of a tenant's data: the store has no encryption
at rest of its own (encrypt the database's disk, or its backups, where that matters).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError

from otherone.store.schema import webhook_secrets

#: What a secret begins with, so one found in a file says what it is.
SECRET_PREFIX = "whsec_"


@dataclass(frozen=True)
class WebhookSecret:
    """A partition's signing secret, and the one it replaced (None: never rotated)."""

    partition_key: str
    secret: str
    created_at: datetime
    previous_secret: str | None = None
    rotated_at: datetime | None = None

    def as_json(self) -> dict[str, str | None]:
        return {
            "partition_key": self.partition_key,
            "secret": self.secret,
            "previous_secret": self.previous_secret,
            "created_at": self.created_at.isoformat(),
            "rotated_at": self.rotated_at.isoformat() if self.rotated_at else None,
        }


def new_secret() -> str:
    """A fresh secret: `SECRET_PREFIX` then 32 random bytes, URL-safe base64."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


class WebhookSecrets:
    """The partitions' webhook secrets (`Store.webhook_secrets`)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def get(self, partition_key: str) -> WebhookSecret:
        """The partition's secret, made now if it has none (two workers racing: one wins, both
        read the same)."""
        found = self._read(partition_key)
        if found is not None:
            return found
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    webhook_secrets.insert().values(
                        partition_key=partition_key,
                        secret=new_secret(),
                        created_at=datetime.now(UTC),
                    )
                )
        except IntegrityError:
            pass  # made meanwhile by another caller
        made = self._read(partition_key)
        assert made is not None
        return made

    def rotate(self, partition_key: str) -> WebhookSecret:
        """A new secret for the partition; the current one becomes ``previous_secret``."""
        current = self.get(partition_key)
        with self._engine.begin() as conn:
            conn.execute(
                update(webhook_secrets)
                .where(webhook_secrets.c.partition_key == partition_key)
                .values(
                    secret=new_secret(),
                    previous_secret=current.secret,
                    rotated_at=datetime.now(UTC),
                )
            )
        rotated = self._read(partition_key)
        assert rotated is not None
        return rotated

    def _read(self, partition_key: str) -> WebhookSecret | None:
        query = select(webhook_secrets).where(webhook_secrets.c.partition_key == partition_key)
        with self._engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        if row is None:
            return None
        return WebhookSecret(
            partition_key=row["partition_key"],
            secret=row["secret"],
            created_at=_aware(row["created_at"]),
            previous_secret=row["previous_secret"],
            rotated_at=_aware(row["rotated_at"]) if row["rotated_at"] else None,
        )


def _aware(moment: datetime) -> datetime:
    """SQLite gives naive datetimes back: they were stored in UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
