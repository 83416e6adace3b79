"""Long-term memory on the database: the seed's memory points, scoped and with provenance.

A memory point is one durable fact (``storage``) filed under free-text semantic ``types``.
Points live in ``otherone_memory_points`` and every query filters by partition key (the tenant
boundary) and by scope: ``shared`` for agents with a shared memory policy, ``agent:<id>`` for an
agent with ``private_agent`` memory, which sees only its own points. Each point records the run,
agent and session that stored it, so a wrong memory can be traced back and deactivated.

Secret-looking values are refused before anything is written (`contains_sensitive_memory`):
long-term memory outlives the conversation and is shared across runs, the worst place for a
password or a card number to end up.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from otherone.store.schema import memory_points

__all__ = [
    "MAX_RECALLED_MEMORIES",
    "SHARED_SCOPE",
    "MemoryPoint",
    "MemoryStore",
    "agent_scope",
    "contains_sensitive_memory",
    "memory_point_id",
]

#: The scope of memory shared by every agent of a partition with a shared memory policy.
SHARED_SCOPE = "shared"
#: At most this many memories come back from one recall (the seed's limit).
MAX_RECALLED_MEMORIES = 64
_RECALL_BATCH_ROWS = 256


def agent_scope(agent_id: str) -> str:
    """The scope of an agent's private memory (``private_agent`` policy)."""
    return f"agent:{agent_id}"


def memory_point_id(partition_key: str, idempotency_key: str) -> str:
    """A point id derived from the tool call, so a retried ``memory.store`` writes once."""
    return hashlib.sha256(f"{partition_key}\x00{idempotency_key}".encode()).hexdigest()


@dataclass(frozen=True)
class MemoryPoint:
    """One stored memory with its provenance."""

    id: str
    partition_key: str
    scope: str
    types: str
    storage: str
    source_run_id: str | None
    source_agent_id: str | None
    source_session_id: str | None
    active: bool
    created_at: datetime


class MemoryStore:
    """Memory points in our database (synchronous: activities call it in a thread)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def store(
        self,
        partition_key: str,
        scope: str,
        *,
        point_id: str,
        types: str,
        storage: str,
        source_run_id: str | None,
        source_agent_id: str | None,
        source_session_id: str | None,
    ) -> str:
        """Insert the point unless ``point_id`` exists already (an activity retry)."""
        values = {
            "id": point_id,
            "partition_key": partition_key,
            "scope": scope,
            "types": types,
            "storage": storage,
            "source_run_id": source_run_id,
            "source_agent_id": source_agent_id,
            "source_session_id": source_session_id,
            "active": True,
            "created_at": datetime.now(UTC),
        }
        try:
            with self.engine.begin() as conn:
                exists = conn.execute(
                    select(memory_points.c.id).where(memory_points.c.id == point_id)
                ).first()
                if exists is None:
                    conn.execute(insert(memory_points).values(**values))
        except IntegrityError:
            pass  # a concurrent attempt of the same call wrote it first
        return point_id

    def recall(
        self,
        partition_key: str,
        scope: str,
        memory_types: Iterable[str],
        *,
        limit: int = MAX_RECALLED_MEMORIES,
    ) -> list[str]:
        """Active memories of the scope whose types match a query, newest first.

        Matching is the seed's: case-insensitive, a query contained in the stored types or the
        stored types contained in the query. It runs over the scope's rows in Python because the
        second direction cannot be written portably (and safely, with LIKE wildcards) in SQL.
        """
        queries = [query.strip().lower() for query in memory_types]
        queries = [query for query in queries if query]
        if not queries or limit <= 0:
            return []
        statement = (
            select(memory_points.c.types, memory_points.c.storage)
            .where(
                (memory_points.c.partition_key == partition_key)
                & (memory_points.c.scope == scope)
                & memory_points.c.active.is_(True)
            )
            .order_by(memory_points.c.created_at.desc(), memory_points.c.id)
            .execution_options(yield_per=_RECALL_BATCH_ROWS)
        )
        found: list[str] = []
        with self.engine.connect() as conn:
            for types, storage in conn.execute(statement):
                if _types_match(types, queries):
                    found.append(storage)
                    if len(found) >= limit:
                        break
        return found

    def get(self, partition_key: str, point_id: str) -> MemoryPoint | None:
        """One point of the partition (for inspection and tests), active or not."""
        statement = select(memory_points).where(
            (memory_points.c.partition_key == partition_key) & (memory_points.c.id == point_id)
        )
        with self.engine.connect() as conn:
            row = conn.execute(statement).first()
        return None if row is None else _point(row._mapping)


def _types_match(types: str, queries: Sequence[str]) -> bool:
    stored = types.lower()
    return any(query in stored or stored in query for query in queries)


def _point(row: Any) -> MemoryPoint:
    return MemoryPoint(
        id=row["id"],
        partition_key=row["partition_key"],
        scope=row["scope"],
        types=row["types"],
        storage=row["storage"],
        source_run_id=row["source_run_id"],
        source_agent_id=row["source_agent_id"],
        source_session_id=row["source_session_id"],
        active=bool(row["active"]),
        created_at=row["created_at"],
    )


# --------------------------------------------------------------------------- secrets

#: The seed's phrases, kept as they are (matched anywhere, case-insensitively).
_SEED_PHRASES = (
    "api key",
    "api_key",
    "password",
    "密码",
    "验证码",
    "verification code",
    "credit card",
    "银行卡",
)
#: More phrases in the same spirit, English and Chinese.
_MORE_PHRASES = (
    "api-key",
    "apikey",
    "secret key",
    "secret_key",
    "secret-key",
    "client secret",
    "private key",
    "access key",
    "passwd",
    "passcode",
    "passphrase",
    "card number",
    "security code",
    "one-time code",
    "one time code",
    "pin code",
    "social security number",
    "口令",
    "校验码",
    "动态码",
    "信用卡",
    "卡号",
    "身份证",
    "密钥",
    "私钥",
    "令牌",
)
_SENSITIVE_PHRASES = _SEED_PHRASES + _MORE_PHRASES
#: "token" only where it names a credential: "tokens" is everyday words in LLM work
#: ("answers under 500 tokens"), so the bare word is matched only as "token: ..."/"token is".
_SENSITIVE_WORDS = re.compile(
    r"\b(?:access|auth|api|bearer|refresh|session|secret|personal|github|slack)[ _-]?tokens?\b"
    r"|\btoken\s*(?:[:=]|is\b)"
    r"|\b(?:otp|cvv|cvc|ssn)\b",
    re.IGNORECASE,
)
#: Values shaped like well-known credentials, whatever words surround them.
_SECRET_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_-]{16,}"  # OpenAI / Anthropic style API keys
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"  # GitHub tokens
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\bAIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\."  # JSON web tokens
    r"|\bbearer\s+[A-Za-z0-9._~+/-]{16,}",
    re.IGNORECASE,
)
#: 13-19 digits, optionally grouped by single spaces or hyphens: a payment card candidate.
_CARD_CANDIDATE = re.compile(r"(?<!\d)\d(?:[ -]?\d){12,18}(?!\d)")


def contains_sensitive_memory(value: str) -> bool:
    """Whether ``value`` looks like it holds a secret: the seed's check, extended.

    Phrases (English and Chinese) naming credentials, verification codes or payment cards;
    values shaped like API keys, tokens or private keys; and card numbers (13-19 digits that
    pass the Luhn check).
    """
    lowered = value.lower()
    return (
        any(phrase in lowered for phrase in _SENSITIVE_PHRASES)
        or _SENSITIVE_WORDS.search(value) is not None
        or _SECRET_SHAPES.search(value) is not None
        or _contains_card_number(value)
    )


def _contains_card_number(value: str) -> bool:
    for match in _CARD_CANDIDATE.finditer(value):
        digits = re.sub(r"[ -]", "", match.group())
        if len(set(digits)) > 1 and _luhn_valid(digits):
            return True
    return False


def _luhn_valid(digits: str) -> bool:
    """The Luhn checksum every payment card number satisfies."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        digit = int(char)
        if position % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0
