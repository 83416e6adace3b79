"""The redaction layer (`otherone.redaction`) and the sinks it is wired into that need no
server: log records, Temporal payloads and failures, store statements, activity errors."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from temporalio.api.failure.v1 import Failure
from temporalio.exceptions import ApplicationError

from otherone import redaction
from otherone.activities.providers.http import error_detail, malformed_chunk
from otherone.payloads import compact_data_converter
from otherone.redaction import (
    REDACTED,
    redact,
    redact_keeping_json,
    redact_urls,
    remember,
    remember_header,
    scrub_exception,
)
from otherone.store.engine import create_store_engine

SECRET = "sk-canary-Qv7Zt2Lm9Xw4Rb8Kp3Hs6Jd1Fg5Nc0Ty"


@pytest.fixture(autouse=True)
def registry() -> Iterator[None]:
    """Each test starts with only the secrets it registers (the registry is per process)."""
    redaction.forget_all()
    yield
    redaction.forget_all()


def pieces(secret: str, size: int = 16) -> list[str]:
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def leaks(shown: str, secret: str = SECRET) -> list[str]:
    return [piece for piece in pieces(secret) if piece in shown]


def test_nothing_registered_changes_nothing() -> None:
    value = f"key {SECRET}"
    assert redact(value) is value


def test_whole_value_and_quoted_forms_are_redacted() -> None:
    remember(SECRET)
    shown = redact(f"a {SECRET} b {json.dumps({'k': SECRET})} {SECRET!r}")
    assert leaks(shown) == []
    assert shown.startswith(f"a {REDACTED} b")


@pytest.mark.parametrize("cut", [12, 17, 25, 33])
def test_a_secret_cut_anywhere_is_redacted(cut: int) -> None:
    remember(SECRET)
    head, tail = SECRET[:cut], SECRET[cut:]
    assert leaks(redact(f"error body ... {head}")) == []
    assert leaks(redact(f"{tail} ... and more")) == []
    assert leaks(redact(f"inner: x{SECRET[5 : 5 + cut]}y")) == []


def test_pieces_shorter_than_the_limit_and_other_text_stay() -> None:
    remember(SECRET)
    assert redact(f"prefix {SECRET[:8]} and sk-canary") == f"prefix {SECRET[:8]} and sk-canary"


def test_short_secrets_only_when_they_stand_alone() -> None:
    remember("postgres")  # 8 characters: a database password
    assert redact("postgresql://db/x user=postgres") == f"postgresql://db/x user={REDACTED}"
    remember("tiny")  # under MIN_SECRET_CHARS: never registered
    assert redact("a tiny word") == "a tiny word"


def test_paths_and_phrases_are_redacted_whole_only() -> None:
    """A secrets-file entry may be a path or a passphrase: its pieces are ordinary text."""
    remember("/srv/app/credentials/service-account.json")
    remember("correct horse battery staple")
    shown = redact(
        "read /srv/app/credentials/service-account.json, not /srv/app/credentials/other.json;"
        " the phrase was correct horse battery staple, a correct horse"
    )
    assert shown == (
        f"read {REDACTED}, not /srv/app/credentials/other.json; the phrase was {REDACTED}, a "
        "correct horse"
    )


def test_header_values_register_the_token_alone_too() -> None:
    remember_header(f"Bearer {SECRET}")
    assert redact(f"got token {SECRET[3:]}") == f"got token {REDACTED}"


def test_json_stays_json_when_a_secret_holds_a_quote() -> None:
    secret = 'pa"ss\\word-Qv7Zt2Lm9Xw4Rb8K'
    remember(secret)
    document = json.dumps({"error": f"echo {secret[:14]}", "n": 1})
    shown = redact_keeping_json(document)
    assert json.loads(shown)["n"] == 1
    assert secret[:14] not in json.loads(shown)["error"]


def test_urls_lose_user_info_and_query() -> None:
    shown = redact_urls("GET https://user:pw@host:8443/v1/x?token=abc#frag done")
    assert shown == "GET https://host:8443/v1/x done"
    assert redact_urls("plain text") == "plain text"


def test_provider_error_detail_is_redacted_before_it_is_cut() -> None:
    remember(SECRET)
    # The key starts 10 characters before the 500-character cut.
    body = json.dumps({"error": {"message": "x" * 490 + f" {SECRET} tail"}})
    detail = error_detail(body)
    assert leaks(detail, SECRET) == [] and SECRET[:10] not in detail
    chunk = malformed_chunk("openai", "y" * 195 + SECRET, "invalid JSON")
    assert SECRET[:5] not in str(chunk)


def test_exception_chains_are_scrubbed_in_place() -> None:
    remember(SECRET)
    error = ApplicationError(f"failed: {SECRET[:20]}", {"echo": SECRET})
    error.__cause__ = ValueError(f"server said {SECRET}")
    assert scrub_exception(error) is error
    assert leaks(error.message) == [] and leaks(str(error)) == []
    assert leaks(json.dumps(error.details)) == []
    assert isinstance(error.__cause__, ValueError) and leaks(str(error.__cause__)) == []


def test_log_records_are_redacted_for_every_handler(caplog: pytest.LogCaptureFixture) -> None:
    redaction.install_log_redaction()
    remember(SECRET)
    logger = logging.getLogger("tests.redaction")
    with caplog.at_level(logging.DEBUG, logger="tests.redaction"):
        logger.warning("env names %r at %s", SECRET, "http://u:p@h/x?key=1")
        try:
            raise RuntimeError(SECRET)
        except RuntimeError:
            logger.exception("failed")
    shown = caplog.text + "".join(r.exc_text or "" for r in caplog.records)
    assert leaks(shown) == [] and "?key=1" not in shown and "u:p@" not in shown


def test_payloads_and_failures_are_redacted() -> None:
    remember(SECRET)
    converter = compact_data_converter
    [payload] = converter.payload_converter.to_payloads([{"echo": SECRET, "n": 2}])
    assert leaks(payload.data.decode()) == []
    assert json.loads(payload.data)["n"] == 2
    failure = Failure()
    converter.failure_converter.to_failure(
        ApplicationError(f"boom {SECRET}"), converter.payload_converter, failure
    )
    assert leaks(failure.message) == [] and leaks(failure.stack_trace) == []


def test_store_statements_never_write_a_secret(tmp_path: object) -> None:
    remember(SECRET)
    engine = create_store_engine(f"sqlite:///{tmp_path}/redaction.db")
    with engine.begin() as connection:
        connection.execute(text("create table t (body text)"))
        connection.execute(text("insert into t values (:body)"), {"body": f"x {SECRET} y"})
        connection.execute(
            text("insert into t values (:body)"),
            [{"body": json.dumps({"k": SECRET[:20]})}, {"body": "plain"}],
        )
        rows = [row[0] for row in connection.execute(text("select body from t"))]
    engine.dispose()
    assert rows[2] == "plain"
    assert all(leaks(row) == [] and SECRET[:14] not in row for row in rows)
    assert json.loads(rows[1])["k"] == REDACTED


def test_a_worker_registers_the_mcp_references_it_can_resolve_when_it_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """Before any session starts (a text produced earlier is redacted too): ``${VAR}`` values
    named or shaped like credentials and every referenced header value are registered; a
    time zone is not (redacting it everywhere would only hide what went wrong), and a missing
    variable is no error here (the session start reports it)."""
    from otherone.config import RuntimeConfig
    from otherone.mcp_servers import McpServer
    from otherone.worker.redacting import remember_configured_secrets

    shaped, header, named, zone = (
        "a1b2c3d4e5f6a7b8c9d0e1f2a3b4",  # an opaque run under plain names
        "plain-header-value",
        "short-pw-1",  # registered for its variable's name
        "Europe/Oslo",
    )
    monkeypatch.delenv("OTHERONE_SECRETS_FILE", raising=False)
    monkeypatch.delenv("CANARY_UNSET_FOR_THIS_TEST", raising=False)
    for name, value in (
        ("CANARY_PLAIN_A", shaped),
        ("CANARY_PLAIN_H", header),
        ("CANARY_DB_PASSWORD", named),
        ("CANARY_ZONE", zone),
    ):
        monkeypatch.setenv(name, value)
    config = RuntimeConfig(
        mcp_servers=[
            McpServer(
                name="local",
                command="x",
                args=("--flag", "${CANARY_UNSET_FOR_THIS_TEST}"),
                env={
                    "NOTE": "${CANARY_PLAIN_A}",
                    "PGPASS": "${CANARY_DB_PASSWORD}",
                    "TZ": "${CANARY_ZONE}",
                },
            ),
            McpServer(
                name="remote",
                url="https://mcp.example.com/mcp",
                headers={"X-A": "${CANARY_PLAIN_H}"},
            ),
        ]
    )
    remember_configured_secrets(config)
    shown = redact(f"{shaped} {header} {named} {zone}")
    assert shown == f"{REDACTED} {REDACTED} {REDACTED} {zone}"
