"""The MCP configuration other clients write, read as our ``[mcp.<server>]`` tables
(``otherone mcp import FILE``).

Shapes read:

* Claude Desktop (``claude_desktop_config.json``), Claude Code (``.mcp.json``) and Cursor
  (``mcp.json``): ``{"mcpServers": {NAME: SERVER}}``;
* VS Code (``.vscode/mcp.json``): ``{"servers": {NAME: SERVER}, "inputs": [...]}``, and the same
  under ``"mcp"`` in its ``settings.json``; comments and trailing commas (VS Code's JSON) are
  accepted.

A SERVER is ``{"command", "args", "env", "cwd"}`` (stdio) or ``{"url", "headers"}`` with
``"type": "http"`` (streamable HTTP). SSE servers (``"type": "sse"``), disabled ones and URLs
carrying a credential are left out, with a note saying why.

Secrets are never copied: a value our loader would refuse as a credential (the rules of
`otherone.mcp_servers`, which follow `otherone.credentials`), a URL with user information, or an
argument after a credential-named flag (``--api-key X``) becomes a ``${VAR}`` reference, and
the variable is listed with where its value was (never the value). The clients' own variables
are translated: ``${env:NAME}`` (VS Code, Cursor) and ``${NAME}``/``${NAME:-default}`` (Claude
Code) to ``${NAME}``, a VS Code ``${input:id}`` to a variable named after the input (listed with
its description), anything else (``${workspaceFolder}``) to a variable to set.

This module does no I/O: `read_client_config` takes the file's text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from otherone.credentials import is_credential_key, is_credential_value, url_credential_parts
from otherone.errors import InvalidRequestError
from otherone.mcp_servers import (
    MCP_SERVER_NAME_PATTERN,
    McpServer,
    secret_fields,
    suggested_variable,
    value_problem,
)

__all__ = ["ImportedConfig", "Variable", "read_client_config", "strip_json_comments"]

_CLIENT_REFERENCE = re.compile(r"\$\{([^{}]*)\}")
_AUTH_VALUE = re.compile(r"^\s*(bearer|basic|token|digest|apikey|api-key)\s+(\S.*)$", re.I)
_STDIO_KEYS = frozenset({"command", "args", "env", "cwd"})
_HTTP_KEYS = frozenset({"url", "headers"})
#: Keys of the clients' server entries that mean nothing here (said in a note when present).
_CLIENT_ONLY_KEYS = frozenset(
    {"type", "disabled", "description", "alwaysAllow", "autoApprove", "gallery", "version"}
)


@dataclass(frozen=True)
class Variable:
    """A worker variable (or secrets-file entry) the imported tables reference."""

    name: str
    #: Where its value is to be found (the place in the imported file, a VS Code input...).
    where: str


@dataclass
class ImportedConfig:
    """What a client's file became: our servers, the variables they need, and notes."""

    servers: list[McpServer] = field(default_factory=list)
    variables: dict[str, Variable] = field(default_factory=dict)
    #: Servers left out or renamed, fields dropped: each one line.
    notes: list[str] = field(default_factory=list)

    def toml(self, source: str) -> str:
        """The ``[mcp.<server>]`` tables (with a comment naming ``source`` and the variables)."""
        lines = [f"# MCP servers imported from {source} by `otherone mcp import`."]
        if self.variables:
            lines.append(
                "# Set on the worker (environment variables or secrets-file entries): "
                + ", ".join(sorted(self.variables))
            )
        for server in self.servers:
            lines += ["", f"[mcp.{server.name}]", *_server_lines(server)]
        return "\n".join(lines) + "\n"


def read_client_config(text: str, source: str) -> ImportedConfig:
    """Our servers for a client's MCP configuration (``source`` names the file in messages).
    A file that is not such a configuration raises `InvalidRequestError` naming what is wrong."""
    try:
        data = json.loads(strip_json_comments(text))
    except json.JSONDecodeError as error:
        raise InvalidRequestError(
            f"{source} is not JSON: {error.msg} at line {error.lineno}"
        ) from None
    if isinstance(data, Mapping) and isinstance(data.get("mcp"), Mapping):
        data = data["mcp"]  # VS Code's settings.json
    if not isinstance(data, Mapping):
        raise InvalidRequestError(f"{source} is not a JSON object")
    key = "mcpServers" if "mcpServers" in data else "servers"
    servers = data.get(key)
    if not isinstance(servers, Mapping):
        raise InvalidRequestError(
            f"{source} declares no MCP servers: expected an object under 'mcpServers' (Claude "
            "Desktop, Claude Code, Cursor) or 'servers' (VS Code)"
        )
    importer = _Importer(source, key, _inputs(data.get("inputs")))
    for name, entry in servers.items():
        importer.add(str(name), entry)
    return importer.result


def strip_json_comments(text: str) -> str:
    """JSON with comments (``//``, ``/* */``) and trailing commas, as VS Code writes it, made
    plain JSON; strings are kept as they are."""
    out: list[str] = []
    index, length = 0, len(text)
    while index < length:
        char = text[index]
        if char == '"':
            end = _string_end(text, index)
            out.append(text[index:end])
            index = end
        elif text.startswith("//", index):
            newline = text.find("\n", index)
            index = length if newline < 0 else newline
        elif text.startswith("/*", index):
            close = text.find("*/", index + 2)
            index = length if close < 0 else close + 2
        else:
            out.append(char)
            index += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def _string_end(text: str, start: int) -> int:
    """The index just past the JSON string opening at ``start``."""
    index = start + 1
    while index < len(text):
        if text[index] == "\\":
            index += 2
        elif text[index] == '"':
            return index + 1
        else:
            index += 1
    return len(text)


def _inputs(value: Any) -> dict[str, str]:
    """VS Code's ``inputs``: id → description."""
    found: dict[str, str] = {}
    if isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping) and isinstance(item.get("id"), str):
                found[item["id"]] = str(item.get("description") or "")
    return found


class _Importer:
    def __init__(self, source: str, key: str, inputs: dict[str, str]) -> None:
        self.source, self.key, self.inputs = source, key, inputs
        self.result = ImportedConfig()
        #: The value each variable made from a literal stands for (to share or split names;
        #: kept in memory only, never printed).
        self._values: dict[str, str] = {}

    def add(self, name: str, entry: Any) -> None:
        place = f"{self.key}.{name}"
        if not isinstance(entry, Mapping):
            self.result.notes.append(f"{place}: left out (not an object)")
            return
        if entry.get("disabled") is True:
            self.result.notes.append(f"{place}: left out (disabled)")
            return
        kind = str(entry.get("type") or ("stdio" if "command" in entry else "http"))
        if kind == "sse":
            self.result.notes.append(
                f"{place}: left out (SSE transport; otherone speaks streamable HTTP: if the "
                "server also offers it, declare its URL, often ending in /mcp)"
            )
            return
        ours = self._name(name)
        body = (
            self._stdio(ours, place, entry) if kind == "stdio" else self._http(ours, place, entry)
        )
        if body is None:
            self.result.notes.append(f"{place}: left out (type '{kind}' is not stdio or http)")
            return
        unresolved = [key for key in ("command", "cwd", "url") if "${" in str(body.get(key, ""))]
        if unresolved:
            self.result.notes.append(
                f"{place}: left out ({', '.join(unresolved)} uses a ${{...}} variable, which "
                "otherone resolves only in env, headers and args: write it out)"
            )
            return
        self._note_dropped(place, entry, _STDIO_KEYS if kind == "stdio" else _HTTP_KEYS)
        try:
            server = McpServer.model_validate({"name": ours, **body})
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'table'}: {problem['msg']}"
                for problem in error.errors(include_url=False, include_input=False)
            )
            self.result.notes.append(f"{place}: left out ({problems})")
            return
        assert not secret_fields(server)  # validation refuses them; a secret is never written
        self.result.servers.append(server)

    def _name(self, name: str) -> str:
        """A valid, unused server name for ``name`` (said in a note when it differs)."""
        base = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")
        base = re.sub(r"^[^a-z]+", "", base)[:32] or "server"
        taken = {server.name for server in self.result.servers}
        ours, number = base, 2
        while ours in taken:
            suffix = f"-{number}"
            ours, number = base[: 32 - len(suffix)] + suffix, number + 1
        if re.fullmatch(MCP_SERVER_NAME_PATTERN, ours) and ours != name:
            self.result.notes.append(f"{self.key}.{name}: imported as [mcp.{ours}]")
        return ours

    def _stdio(self, server: str, place: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"command": self._text(server, entry.get("command"))}
        args = entry.get("args") or []
        if isinstance(args, list):
            body["args"] = self._args(server, place, [_as_text(arg) for arg in args])
        env = entry.get("env") or {}
        if isinstance(env, Mapping):
            body["env"] = {
                str(target): self._value(
                    server, f"{place}.env.{target}", "env", str(target), _as_text(value)
                )
                for target, value in env.items()
            }
        if isinstance(entry.get("cwd"), str):
            body["cwd"] = self._text(server, entry["cwd"])
        return body

    def _http(self, server: str, place: str, entry: Mapping[str, Any]) -> dict[str, Any] | None:
        if str(entry.get("type") or "http") not in ("http", "streamable-http", "streamableHttp"):
            return None
        body: dict[str, Any] = {"url": self._text(server, entry.get("url"))}
        headers = entry.get("headers") or {}
        if isinstance(headers, Mapping):
            body["headers"] = {
                str(name): self._value(
                    server, f"{place}.headers.{name}", "header", str(name), value
                )
                for name, value in headers.items()
            }
        return body

    def _note_dropped(self, place: str, entry: Mapping[str, Any], kept: frozenset[str]) -> None:
        dropped = sorted(set(map(str, entry)) - kept - _CLIENT_ONLY_KEYS)
        if "envFile" in dropped:
            self.result.notes.append(
                f"{place}: envFile is not read: set its variables on the worker and reference "
                'them in env ("${NAME}")'
            )
            dropped.remove("envFile")
        if dropped:
            self.result.notes.append(f"{place}: ignored {', '.join(dropped)}")

    # ----------------------------------------------------------------------- values

    def _args(self, server: str, place: str, args: list[str]) -> list[str]:
        """Arguments, with secrets (a credential shape, a URL with user information, the value
        of ``--token X`` or ``--api-key=X``) made references."""
        converted: list[str] = []
        for index, arg in enumerate(args):
            flag, equals, inline = arg.partition("=")
            follows_flag = (
                index > 0
                and _is_secret_flag(args[index - 1])
                and "=" not in args[index - 1]
                and not arg.startswith("-")
            )
            text = self._translated(arg, server)
            if equals and _is_secret_flag(flag) and not _CLIENT_REFERENCE.search(inline):
                variable = self._variable(
                    server,
                    f"{flag.lstrip('-')}",
                    inline,
                    f"{place}.args[{index}] (after '{flag}=')",
                )
                converted.append(f"{flag}=${{{variable}}}")
            elif follows_flag and not _CLIENT_REFERENCE.search(arg):
                flag_name = args[index - 1].lstrip("-")
                variable = self._variable(server, flag_name, arg, f"{place}.args[{index}]")
                converted.append(f"${{{variable}}}")
            elif _secret_literal(text):
                variable = self._variable(server, f"arg_{index}", arg, f"{place}.args[{index}]")
                converted.append(f"${{{variable}}}")
            else:
                converted.append(text)
        return converted

    def _value(self, server: str, place: str, kind: str, target: str, value: Any) -> str:
        """An ``env`` or header value: client references translated; a value our loader would
        refuse (a secret, a credential-named target without a reference, a bare variable
        name) made a reference to a variable holding it."""
        text = self._translated(str(value), server)
        if value_problem(kind, server, target, text) is None and not _secret_literal(text):
            return text
        scheme = _AUTH_VALUE.match(str(value)) if kind == "header" else None
        if scheme is not None and not _CLIENT_REFERENCE.search(scheme.group(2)):
            variable = self._variable(
                server, target, scheme.group(2), f"the token after '{scheme.group(1)} ' in {place}"
            )
            return f"{scheme.group(1)} ${{{variable}}}"
        return f"${{{self._variable(server, target, str(value), place)}}}"

    def _translated(self, text: str, server: str) -> str:
        """The clients' ``${...}`` forms as ours (each a listed variable)."""

        def ours(found: re.Match[str]) -> str:
            inner = found.group(1)
            kind, colon, rest = inner.partition(":")
            if colon and kind == "env":
                name = _variable_name(rest)
                self._need(name, f"a worker variable (the file read ${{env:{rest}}})")
            elif colon and kind == "input":
                name = _variable_name(rest)
                described = self.inputs.get(rest)
                self._need(
                    name, f"VS Code input '{rest}'" + (f": {described}" if described else "")
                )
            elif re.fullmatch(r"[A-Z_][A-Z0-9_]*", inner.split(":-", 1)[0]):
                name = inner.split(":-", 1)[0]
                default = " (the file's default is not kept)" if ":-" in inner else ""
                self._need(name, f"a worker variable (the file read ${{{inner}}}){default}")
            else:
                name = _variable_name(inner)
                self._need(name, f"what ${{{inner}}} stood for in the client")
            return f"${{{name}}}"

        return _CLIENT_REFERENCE.sub(ours, text)

    def _text(self, server: str, value: Any) -> Any:
        return self._translated(value, server) if isinstance(value, str) else value

    def _need(self, name: str, where: str) -> None:
        self.result.variables.setdefault(name, Variable(name, where))

    def _variable(self, server: str, target: str, value: str, place: str) -> str:
        """A variable for a value taken out of the file: shared by places holding the same
        value, else distinct (from the file's own references too)."""
        base = suggested_variable(server, target)
        name, number = base, 2
        if self._clashes(name, value):
            name = suggested_variable(server, target.lower())  # prefixed by the server
        while self._clashes(name, value):
            name, number = f"{base}_{number}", number + 1
        if name not in self._values:
            self._values[name] = value
            self.result.variables[name] = Variable(name, f"the value of {place} in {self.source}")
        return name

    def _clashes(self, name: str, value: str) -> bool:
        return name in self.result.variables and self._values.get(name) != value


def _as_text(value: Any) -> str:
    """A JSON value as the text a process gets (``true``, ``8080``; strings as they are)."""
    return value if isinstance(value, str) else json.dumps(value)


def _secret_literal(text: str) -> bool:
    """A literal (references aside) holding a credential, or a URL with one."""
    literal = _CLIENT_REFERENCE.sub("", text)
    if is_credential_value(literal):
        return True
    return "://" in literal and bool(url_credential_parts(literal))


def _is_secret_flag(arg: str) -> bool:
    """A flag whose value is a credential by its name (``--api-key``, ``--token``,
    ``--password``; not ``--token-file`` or ``--session-timeout``: the key rule of
    `otherone.credentials`)."""
    return arg.startswith("-") and is_credential_key(arg.lstrip("-"))


def _variable_name(text: str) -> str:
    """An upper-case variable name for a client's id (``github-token`` → ``GITHUB_TOKEN``,
    ``workspaceFolder`` → ``WORKSPACE_FOLDER``)."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text)
    name = re.sub(r"[^A-Za-z0-9]+", "_", spaced).strip("_").upper() or "VALUE"
    return name if re.match(r"[A-Z_]", name) else f"V_{name}"


# --------------------------------------------------------------------------- TOML


def _server_lines(server: McpServer) -> list[str]:
    fields: list[tuple[str, Any]] = [
        ("command", server.command),
        ("args", list(server.args)),
        ("env", server.env),
        ("cwd", server.cwd),
        ("url", server.url),
        ("headers", server.headers),
    ]
    return [f"{key} = {_toml_value(value)}" for key, value in fields if value]


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped too.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007F")
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        items = ", ".join(f"{_toml_key(key)} = {_toml_value(item)}" for key, item in value.items())
        return "{ " + items + " }" if items else "{}"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)
