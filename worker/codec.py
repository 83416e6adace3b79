"""Payload encryption: an AES-256-GCM `PayloadCodec` with key ids, and its keys from settings.

Why a codec: everything a run sends through Temporal (workflow input with the prompt, activity
inputs and results, memos, summaries, failure messages) is stored in the server's history. With
the codec on, the client and the worker encrypt each payload before it leaves the process, so
the server (and anyone reading its database or Web UI) sees only ciphertext; an operator reads
it back through the codec server (`otherone.worker.codec_server`).

Format of an encrypted payload::

    metadata  encoding = "binary/encrypted", encryption-key-id = "<key id>"
    data      nonce (12 random bytes) || AES-GCM(serialized original Payload, aad = key id)

The original payload (its own metadata included) is what gets encrypted, so decoding gives back
exactly what the data converter wrote. Keys rotate by id: the first key encrypts, every known
key decrypts, so old histories stay readable while new payloads use the new key. A payload that
is not encrypted (written before encryption was turned on) passes through unchanged.

Keys come from ``OTHERONE_ENCRYPTION_KEYS="k2:<base64 of 32 bytes>,k1:<base64>"`` and/or the
file named by ``OTHERONE_ENCRYPTION_KEY_FILE`` (one ``id:base64`` a line, ``#`` comments); the
first key listed (the variable's before the file's) is the active one. A key is generated with
``python -c "import base64, os; print(base64.b64encode(os.urandom(32)).decode())"``.

This module imports ``cryptography`` (a native library): keep it out of workflow modules.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from otherone.errors import ConfigurationError, OtheroneError
from otherone.redaction import remember

if TYPE_CHECKING:
    from otherone.worker.settings import Settings

__all__ = [
    "ENCODING",
    "KEYS_SETTING",
    "KEY_FILE_SETTING",
    "KEY_ID_METADATA",
    "EncryptionCodec",
    "EncryptionKey",
    "PayloadDecryptionError",
    "codec_from_settings",
    "load_key_file",
    "parse_keys",
]

ENCODING: Final = b"binary/encrypted"
KEY_ID_METADATA: Final = "encryption-key-id"
KEYS_SETTING: Final = "OTHERONE_ENCRYPTION_KEYS"
KEY_FILE_SETTING: Final = "OTHERONE_ENCRYPTION_KEY_FILE"
KEY_BYTES: Final = 32  # AES-256
NONCE_BYTES: Final = 12  # 96 bits, random per payload (GCM's recommended size)
TAG_BYTES: Final = 16
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class PayloadDecryptionError(OtheroneError):
    """An encrypted payload cannot be decrypted: unknown key id, wrong key, or altered data."""

    def __init__(self, message: str, *, key_id: str | None = None) -> None:
        self.key_id = key_id
        super().__init__(message)


@dataclass(frozen=True)
class EncryptionKey:
    """One AES-256 key and the id stored next to what it encrypts."""

    key_id: str
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not _KEY_ID.fullmatch(self.key_id):
            raise ConfigurationError(
                f"key id '{_shown(self.key_id)}' must match {_KEY_ID.pattern}", field=KEYS_SETTING
            )
        if len(self.secret) != KEY_BYTES:
            raise ConfigurationError(
                f"key '{self.key_id}' is {len(self.secret)} bytes; AES-256 needs {KEY_BYTES}",
                field=KEYS_SETTING,
            )


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM with a random 96-bit nonce per payload; ``keys[0]`` encrypts, all decrypt."""

    def __init__(self, keys: Sequence[EncryptionKey]) -> None:
        if not keys:
            raise ConfigurationError("at least one key is required", field=KEYS_SETTING)
        _check_unique(keys, KEYS_SETTING)
        self._active = keys[0]
        self._ciphers = {key.key_id: AESGCM(key.secret) for key in keys}

    @property
    def active_key_id(self) -> str:
        return self._active.key_id

    @property
    def key_ids(self) -> list[str]:
        return list(self._ciphers)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.encrypt(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.decrypt(payloads)

    # The synchronous halves serve the codec server's handler threads as well.

    def encrypt(self, payloads: Iterable[Payload]) -> list[Payload]:
        return [self._encrypt_one(payload) for payload in payloads]

    def decrypt(self, payloads: Iterable[Payload]) -> list[Payload]:
        return [self._decrypt_one(payload) for payload in payloads]

    def _encrypt_one(self, payload: Payload) -> Payload:
        key_id = self._active.key_id
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[key_id].encrypt(nonce, payload.SerializeToString(), key_id.encode())
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_METADATA: key_id.encode()},
            data=nonce + sealed,
        )

    def _decrypt_one(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # not ours: written before encryption was turned on
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode("utf-8", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            known = ", ".join(self._ciphers)
            raise PayloadDecryptionError(
                f"payload was encrypted with key '{_shown(key_id)}', which is not configured "
                f"(known: {known}); add it to {KEYS_SETTING} or {KEY_FILE_SETTING}",
                key_id=key_id,
            )
        if len(payload.data) < NONCE_BYTES + TAG_BYTES:
            raise PayloadDecryptionError(
                f"encrypted payload (key '{key_id}') is truncated", key_id=key_id
            )
        nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        try:
            plain = cipher.decrypt(nonce, sealed, key_id.encode())
            return Payload.FromString(plain)
        except (InvalidTag, DecodeError):
            raise PayloadDecryptionError(
                f"encrypted payload (key '{key_id}') failed authentication: it was altered, "
                f"or the configured key '{key_id}' is not the one that encrypted it",
                key_id=key_id,
            ) from None


# --------------------------------------------------------------------------- keys from settings


def parse_keys(text: str, *, setting: str = KEYS_SETTING) -> list[EncryptionKey]:
    """Keys from ``"id:base64,id:base64"`` (commas or new lines; ``#`` starts a comment).

    Errors name ``setting`` and the key id, never the key material.
    """
    keys: list[EncryptionKey] = []
    entries = (line.split("#", 1)[0] for line in text.splitlines())
    for position, entry in enumerate(
        part.strip() for line in entries for part in line.split(",") if part.strip()
    ):
        key_id, colon, encoded = entry.partition(":")
        key_id, encoded = key_id.strip(), encoded.strip()
        if not colon or not key_id or not encoded:
            raise ConfigurationError(f"entry {position + 1} is not 'id:base64key'", field=setting)
        keys.append(_key(key_id, encoded, setting))
    if not keys:
        raise ConfigurationError("no keys given", field=setting)
    _check_unique(keys, setting)
    return keys


def load_key_file(path: Path) -> list[EncryptionKey]:
    """Keys from a file in `parse_keys`' format (one ``id:base64`` a line)."""
    setting = f"{KEY_FILE_SETTING} ({path})"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise ConfigurationError(f"cannot read the key file: {reason}", field=setting) from None
    return parse_keys(text, setting=setting)


def codec_from_settings(settings: Settings) -> EncryptionCodec | None:
    """The codec the settings ask for, or None when no key is configured (no encryption)."""
    keys: list[EncryptionKey] = []
    if settings.encryption_keys is not None:
        keys += parse_keys(settings.encryption_keys.get_secret_value())
    if settings.encryption_key_file is not None:
        keys += load_key_file(settings.encryption_key_file)
    if not keys:
        return None
    _check_unique(keys, f"{KEYS_SETTING} / {KEY_FILE_SETTING}")
    return EncryptionCodec(keys)


def _key(key_id: str, encoded: str, setting: str) -> EncryptionKey:
    remember(encoded)
    try:
        # Standard or URL-safe alphabet; padding required (a cut-off key is an error).
        standard = encoded.replace("-", "+").replace("_", "/")
        secret = base64.b64decode(standard, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigurationError(
            f"key '{_shown(key_id)}' is not valid base64", field=setting
        ) from None
    if len(secret) != KEY_BYTES:
        raise ConfigurationError(
            f"key '{_shown(key_id)}' decodes to {len(secret)} bytes; AES-256 needs {KEY_BYTES} "
            f"(e.g. base64 of os.urandom({KEY_BYTES}))",
            field=setting,
        )
    if not _KEY_ID.fullmatch(key_id):
        raise ConfigurationError(
            f"key id '{_shown(key_id)}' must match {_KEY_ID.pattern}", field=setting
        )
    return EncryptionKey(key_id, secret)


def _check_unique(keys: Sequence[EncryptionKey], setting: str) -> None:
    seen: set[str] = set()
    for key in keys:
        if key.key_id in seen:
            raise ConfigurationError(f"key id '{key.key_id}' is given twice", field=setting)
        seen.add(key.key_id)


def _shown(text: str) -> str:
    """A key id for an error message: printable and short (it may come from a payload)."""
    cleaned = "".join(char if char.isprintable() else "?" for char in text)
    return cleaned if len(cleaned) <= 64 else cleaned[:61] + "..."
