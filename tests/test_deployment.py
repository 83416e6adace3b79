"""The production deployment: docker-compose.yml, the Dockerfiles and the worker's settings.

Why: Docker does not run here (nor in CI), so a wrong port, a password set in one service and
not the other, a worker setting nobody sets, an image that lacks a package or a search attribute
missing from the setup job would only show up on someone's server. These tests read the files
as Docker would (compose variables interpolated, Dockerfile instructions per stage) and check
the wiring between them and the code: `Settings.model_fields` (every setting the worker reads is
set by the stack or consciously left at its default), `CUSTOM_SEARCH_ATTRIBUTES`, the packages
of pyproject.toml, the health script, the collector's configuration. The namespace setup script
runs for real against the session's Temporal dev server; the settings checks run the real CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import yaml
from sqlalchemy.engine import make_url
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from otherone.activities.providers.secrets import DEFAULT_KEY_ENV, SECRETS_FILE_ENV
from otherone.search_attributes import CUSTOM_SEARCH_ATTRIBUTES, type_name
from otherone.toml_config import load_config
from otherone.worker.devserver import find_temporal_binary
from otherone.worker.settings import Settings
from otherone.worker.shutdown import ABANDON_AFTER_SECONDS

REPO = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO / "docker-compose.yml"
DEPLOY = REPO / "deploy"
RAW = yaml.safe_load(COMPOSE_FILE.read_text())

#: Settings the worker service does not set, each with the reason its default is right there.
#: A new `Settings` field must be added either to the worker's environment in
#: docker-compose.yml (usually as a pass-through, ``OTHERONE_X: ${OTHERONE_X:-}``) or here.
NOT_SET_BY_THE_WORKER_SERVICE = {
    "data_dir": "only `otherone dev` and the default SQLite store use it; the stack sets "
    "OTHERONE_DATABASE_URL",
    "ui_port": "the Web UI of `otherone dev` (the stack runs temporal-ui)",
    "temporal_port": "the dev server of `otherone dev`",
    "codec_server_token": "`otherone codec-server` only, not run by the stack",
    "ui_codec_endpoint": "`otherone dev` only; the stack's UI takes TEMPORAL_UI_CODEC_ENDPOINT",
    "partition": "the tenant CLI commands act for; a worker serves every partition",
    "identity": "who CLI commands decide approvals as; a worker decides none",
    "serve_host": "`otherone serve` only (the serve service sets it)",
    "serve_port": "`otherone serve` only (the serve service sets it)",
    "serve_tokens": "`otherone serve` only (the serve service passes it through)",
    "serve_heartbeat_seconds": "`otherone serve` only (the serve service passes it through)",
    "serve_cors_origins": "`otherone serve` only (the serve service passes it through)",
    "serve_show_ui_url": "`otherone serve` only (the serve service passes it through)",
}
#: Worker settings the stack itself decides (the others pass through from the shell or .env).
SET_BY_THE_STACK = {
    "temporal_address",
    "namespace",
    "config",
    "database_url",
    "health_file",
    "metrics_port",
    "metrics_host",
    "ui_url",
}
ONE_SHOT_JOBS = {"temporal-schema", "temporal-setup"}
LONG_RUNNING = {
    "temporal-db",
    "temporal",
    "temporal-ui",
    "store-db",
    "worker",
    "serve",
    "otel-collector",
}
START_ORDER = {  # service -> {dependency: condition}
    "temporal-schema": {"temporal-db": "service_healthy"},
    "temporal": {"temporal-schema": "service_completed_successfully"},
    "temporal-setup": {"temporal": "service_healthy"},
    "temporal-ui": {"temporal": "service_healthy"},
    "worker": {"store-db": "service_healthy", "temporal-setup": "service_completed_successfully"},
    "serve": {"store-db": "service_healthy", "temporal-setup": "service_completed_successfully"},
}


# --------------------------------------------------------------------------- reading the files


class MissingVariable(KeyError):
    pass


_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_]\w*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_]\w*))"
)


def interpolate_text(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable syntax: ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``,
    ``${VAR-default}``, ``${VAR:?error}``."""

    def substitute(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["bare"]
        value, op, arg = env.get(name), match["op"], match["arg"] or ""
        if op == ":-":
            return value or arg
        if op == "-":
            return arg if value is None else value
        if value is None or (op == ":?" and not value):
            raise MissingVariable(name)
        return value

    return _VARIABLE.sub(substitute, text)


def interpolate(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate_text(node, env)
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    return node


def stack(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """docker-compose.yml as `docker compose config` would see it with ``env`` (default: none)."""
    result: dict[str, Any] = interpolate(RAW, env or {})
    return result


def variables_used() -> set[str]:
    matches = _VARIABLE.finditer(COMPOSE_FILE.read_text())
    return {name for match in matches if (name := match["braced"] or match["bare"])}


def services(env: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = stack(env)["services"]
    return found


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):  # KEY=VALUE list form
        env = dict(item.split("=", 1) for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def bind_mounts(service: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) of the service's bind mounts (short and long syntax)."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            parts = volume.split(":")
            if parts[0].startswith((".", "/")):
                mounts.append((parts[0], parts[1], len(parts) > 2 and "ro" in parts[2]))
        elif volume.get("type") == "bind":
            mounts.append((volume["source"], volume["target"], bool(volume.get("read_only"))))
    return mounts


def seconds(duration: str) -> float:
    """A compose duration (``45s``, ``1m30s``) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(number) * units[unit] for number, unit in parts)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    stage: int  # 0-based index of the FROM it belongs to

    def exec_form(self) -> list[str]:
        parsed = json.loads(self.arguments)
        assert isinstance(parsed, list), self
        return [str(item) for item in parsed]


def dockerfile(path: Path) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    assert not pending, f"{path}: dangling line continuation"
    instructions, stage = [], -1
    for line in logical:
        keyword, _, arguments = line.partition(" ")
        if keyword.upper() == "FROM":
            stage += 1
        instructions.append(Instruction(keyword.upper(), arguments.strip(), stage))
    return instructions


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    last = max(instruction.stage for instruction in instructions)
    return [instruction for instruction in instructions if instruction.stage == last]


def pinned(image: str) -> bool:
    """``name:tag`` with a tag that starts with a version number (no ``latest``)."""
    name, _, tag = image.rpartition(":")
    return bool(name) and "/" not in tag and re.match(r"^\d+(\.\d+)*", tag) is not None


WORKER_DOCKERFILE = dockerfile(REPO / "Dockerfile")
COLLECTOR_DOCKERFILE = dockerfile(DEPLOY / "otel-collector.Dockerfile")


# --------------------------------------------------------------------------- compose: shape


def test_compose_works_without_any_variable_set() -> None:
    stack({})  # raises MissingVariable for a ${VAR} without a default
    header = COMPOSE_FILE.read_text().split("\nservices:", 1)[0]
    passed_through = re.compile(r"^(OTHERONE_\w+|OTEL_\w+|\w+_API_KEY)$")
    undocumented = {
        name
        for name in variables_used()
        if not passed_through.match(name) and not re.search(rf"\b{name}\b", header)
    }
    assert not undocumented, f"compose variables missing from the header comment: {undocumented}"
    operations = (REPO / "docs" / "operations.md").read_text()
    missing = {
        name
        for name in variables_used()
        if name not in operations and not name.startswith("OTHERONE_")  # those: worker --help
    }
    assert not missing, f"compose variables missing from docs/operations.md: {missing}"


def test_readme_says_how_to_start_the_stack() -> None:
    readme = (REPO / "README.md").read_text()
    assert "docker compose up" in readme and "docs/operations.md" in readme


def test_services_and_pinned_images() -> None:
    found = services()
    assert set(found) == LONG_RUNNING | ONE_SHOT_JOBS
    for name, service in found.items():
        image = service.get("image", "")
        assert image, f"{name}: no image name"
        if "build" not in service:
            assert pinned(image), f"{name}: image {image!r} is not pinned to a version"
    for path, instructions in (
        ("Dockerfile", WORKER_DOCKERFILE),
        ("deploy/otel-collector.Dockerfile", COLLECTOR_DOCKERFILE),
    ):
        for instruction in instructions:
            if instruction.keyword == "FROM":
                image = instruction.arguments.split()[0]
                assert pinned(image), f"{path}: base image {image!r} is not pinned"


def test_long_running_services_have_healthchecks_restarts_and_log_rotation() -> None:
    for name in LONG_RUNNING:
        service = services()[name]
        check = service.get("healthcheck", {})
        assert check.get("test", [None])[0] in ("CMD", "CMD-SHELL"), f"{name}: no healthcheck"
        for key in ("interval", "timeout", "retries", "start_period"):
            assert key in check, f"{name}: healthcheck without {key}"
        assert service.get("restart") == "unless-stopped", name
        options = service.get("logging", {}).get("options", {})
        assert options.get("max-size") and options.get("max-file"), f"{name}: logs never rotate"


def test_start_order_waits_for_health_and_for_the_setup_jobs() -> None:
    found = services()
    for name, service in found.items():
        depends = {dep: spec["condition"] for dep, spec in service.get("depends_on", {}).items()}
        assert depends == START_ORDER.get(name, {}), name
        for dependency, condition in depends.items():
            if condition == "service_healthy":
                assert "healthcheck" in found[dependency], dependency
            else:
                assert dependency in ONE_SHOT_JOBS, dependency
    for job in ONE_SHOT_JOBS:
        assert found[job]["restart"].startswith("on-failure"), job
        assert "healthcheck" not in found[job], job


def published_ports(service: Mapping[str, Any]) -> list[str]:
    """The service's ports as ``[host_ip:]published:target`` (short and long syntax)."""
    found = []
    for port in service.get("ports", []):
        if isinstance(port, str):
            found.append(port)
        else:
            host_ip = f"{port['host_ip']}:" if port.get("host_ip") else ""
            found.append(f"{host_ip}{port['published']}:{port['target']}")
    return found


def test_only_the_temporal_frontend_the_ui_and_the_api_are_published() -> None:
    published = {name for name, service in services().items() if service.get("ports")}
    assert published == {"temporal", "temporal-ui", "serve"}
    assert published_ports(services()["serve"]) == ["127.0.0.1:8000:8000"]  # loopback default
    assert services()["serve"]["profiles"] == ["api"]  # optional, like the collector
    assert published_ports(services()["temporal"]) == ["7233:7233"]
    assert published_ports(services()["temporal-ui"]) == ["8080:8080"]
    moved = services({"TEMPORAL_PORT": "17233", "TEMPORAL_UI_PORT": "18080"})
    assert published_ports(moved["temporal"]) == ["17233:7233"]
    assert published_ports(moved["temporal-ui"]) == ["18080:8080"]
    assert environment(moved["temporal-ui"])["TEMPORAL_CORS_ORIGINS"] == "http://localhost:18080"


def test_loopback_publishing_keeps_the_ui_origin_a_valid_url() -> None:
    """docs/operations.md: bind addresses and ports are separate variables, so publishing on
    loopback does not turn the UI's CORS origin into ``http://localhost:127.0.0.1:8080``."""
    env = {
        "TEMPORAL_BIND": "127.0.0.1",
        "TEMPORAL_UI_BIND": "127.0.0.1",
        "TEMPORAL_UI_PORT": "18080",
    }
    loopback = services(env)
    assert published_ports(loopback["temporal"]) == ["127.0.0.1:7233:7233"]
    assert published_ports(loopback["temporal-ui"]) == ["127.0.0.1:18080:8080"]
    origin = environment(loopback["temporal-ui"])["TEMPORAL_CORS_ORIGINS"]
    assert origin == "http://localhost:18080"
    for service in loopback.values():
        for port in service.get("ports", []):
            assert isinstance(port, dict) and str(port["published"]).isdigit(), port
    operations = (REPO / "docs" / "operations.md").read_text()
    assert "TEMPORAL_UI_BIND=127.0.0.1" in operations
    assert not re.search(r"TEMPORAL_(UI_)?PORT=\d+\.\d+", operations)


def test_every_bind_mount_source_exists() -> None:
    for name, service in services().items():
        for source, target, read_only in bind_mounts(service):
            assert (REPO / source).exists(), f"{name}: {source} (mounted at {target}) is missing"
            assert read_only, f"{name}: {source} is mounted writable"


# --------------------------------------------------------------------------- compose: Temporal


def test_temporal_server_schema_job_and_database_agree() -> None:
    for env in ({}, {"TEMPORAL_DB_PASSWORD": "t3mp0ral"}):
        found = services(env)
        database = environment(found["temporal-db"])
        server = environment(found["temporal"])
        schema = environment(found["temporal-schema"])
        assert server["DB"] == "postgres12"
        assert server["POSTGRES_SEEDS"] == schema["POSTGRES_SEEDS"] == "temporal-db"
        assert server["POSTGRES_USER"] == schema["POSTGRES_USER"] == database["POSTGRES_USER"]
        password = database["POSTGRES_PASSWORD"]
        assert server["POSTGRES_PWD"] == schema["SQL_PASSWORD"] == password
        assert password == env.get("TEMPORAL_DB_PASSWORD", password)
        assert server["BIND_ON_IP"] == "0.0.0.0"  # reachable from the other containers


def test_temporal_dynamic_config_is_mounted_and_well_formed() -> None:
    server = services()["temporal"]
    path = environment(server)["DYNAMIC_CONFIG_FILE_PATH"]
    ((source, target, _),) = bind_mounts(server)
    assert path.startswith(target + "/")
    config = yaml.safe_load((REPO / source / path.removeprefix(target + "/")).read_text())
    assert config, "empty dynamic config"
    for key, values in config.items():
        assert isinstance(values, list) and values, key
        assert all(set(value) == {"value", "constraints"} for value in values), key


@pytest.mark.parametrize(
    ("job", "script"),
    [("temporal-schema", "setup-schema.sh"), ("temporal-setup", "setup-namespace.sh")],
)
def test_setup_scripts_parse_and_get_every_variable_they_require(job: str, script: str) -> None:
    path = DEPLOY / "temporal" / script
    syntax = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True, check=False)
    assert syntax.returncode == 0, syntax.stderr
    required = set(re.findall(r"\$\{(\w+):\?", path.read_text()))
    assert required, f"{script} declares no required variable"
    assert required <= set(environment(services()[job])), required
    ((source, _, _),) = bind_mounts(services()[job])
    assert (REPO / source).resolve() == path.resolve()


def test_setup_job_registers_exactly_the_search_attributes_of_the_code() -> None:
    job = environment(services()["temporal-setup"])
    declared = dict(pair.split("=") for pair in job["OTHERONE_SEARCH_ATTRIBUTES"].split())
    assert declared == {key.name: type_name(key) for key in CUSTOM_SEARCH_ATTRIBUTES}
    ((source, target, _),) = bind_mounts(services()["temporal-setup"])
    assert source.endswith("setup-namespace.sh")
    assert services()["temporal-setup"]["command"] == [target]


def test_namespace_is_the_same_for_setup_ui_and_workers() -> None:
    for env in ({}, {"TEMPORAL_NAMESPACE": "agents"}):
        found = services(env)
        namespace = environment(found["worker"])["OTHERONE_NAMESPACE"]
        assert namespace == env.get("TEMPORAL_NAMESPACE", "default")
        assert environment(found["temporal-setup"])["NAMESPACE"] == namespace
        assert environment(found["temporal-ui"])["TEMPORAL_DEFAULT_NAMESPACE"] == namespace


# --------------------------------------------------------------------------- compose: the worker


def test_every_worker_setting_is_set_by_the_stack_or_has_a_reasoned_default() -> None:
    env = environment(services()["worker"])
    fields = set(Settings.model_fields)
    stale = set(NOT_SET_BY_THE_WORKER_SERVICE) - fields
    assert not stale, f"NOT_SET_BY_THE_WORKER_SERVICE names removed settings: {stale}"
    unset = {
        name
        for name in fields
        if f"OTHERONE_{name.upper()}" not in env and name not in NOT_SET_BY_THE_WORKER_SERVICE
    }
    assert not unset, (
        f"settings the worker service neither sets nor passes through: {sorted(unset)}; add "
        "them to docker-compose.yml (OTHERONE_X: ${OTHERONE_X:-}) or, with the reason, to "
        "NOT_SET_BY_THE_WORKER_SERVICE"
    )
    both = {f"OTHERONE_{name.upper()}" for name in NOT_SET_BY_THE_WORKER_SERVICE} & set(env)
    assert not both, both
    for name in SET_BY_THE_STACK:
        assert env[f"OTHERONE_{name.upper()}"], f"{name} must be set by the stack itself"


def test_worker_variables_not_set_by_the_stack_pass_through_unchanged() -> None:
    raw = {key: str(value) for key, value in RAW["services"]["worker"]["environment"].items()}
    fixed = {f"OTHERONE_{name.upper()}" for name in SET_BY_THE_STACK} | {"OTEL_SERVICE_NAME"}
    for name, value in raw.items():
        if name not in fixed:
            assert value == f"${{{name}:-}}", f"{name}: {value!r} is not a plain pass-through"
    assert {*DEFAULT_KEY_ENV.values(), SECRETS_FILE_ENV} <= set(raw)  # model API keys
    passed = environment(services({"OTHERONE_MAX_CONCURRENT_ACTIVITIES": "16"})["worker"])
    assert passed["OTHERONE_MAX_CONCURRENT_ACTIVITIES"] == "16"


@pytest.fixture
def worker_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """The worker's `Settings` as a container of the default stack gets them."""
    for name in list(os.environ):
        if name.startswith(("OTHERONE_", "OTEL_")):
            monkeypatch.delenv(name)
    for name, value in environment(services()["worker"]).items():
        monkeypatch.setenv(name, value)
    yield Settings(_env_file=None)  # type: ignore[call-arg]


def test_worker_settings_point_at_the_stack(worker_settings: Settings) -> None:
    found = services()
    host, _, port = worker_settings.temporal_address.partition(":")
    assert host == "temporal" and port == "7233"
    assert found["temporal"]["healthcheck"]["test"][-1] == port
    assert worker_settings.tracing is False  # no OTLP endpoint given: nothing to export to
    assert worker_settings.shutdown_grace_seconds == 30.0  # empty pass-through: the default

    url = make_url(worker_settings.store_url())
    store = environment(found["store-db"])
    assert url.drivername == "postgresql+psycopg"
    assert (url.host, url.port) == ("store-db", 5432)
    assert url.username == store["POSTGRES_USER"] and url.password == store["POSTGRES_PASSWORD"]
    assert url.database == store["POSTGRES_DB"]


def test_store_password_is_the_same_for_the_database_and_the_workers() -> None:
    found = services({"STORE_DB_PASSWORD": "s3cret-Pa55"})
    url = make_url(environment(found["worker"])["OTHERONE_DATABASE_URL"])
    assert url.password == environment(found["store-db"])["POSTGRES_PASSWORD"] == "s3cret-Pa55"


def test_worker_config_is_mounted_and_the_default_one_loads(worker_settings: Settings) -> None:
    worker = services()["worker"]
    ((source, target, _),) = bind_mounts(worker)
    assert worker_settings.config.parent == Path(target)
    config = load_config(REPO / source / worker_settings.config.name)
    assert config.agents  # the example team runs offline (scripted model)
    custom = services({"CONFIG_DIR": "/srv/otherone"})["worker"]
    assert bind_mounts(custom)[0][0] == "/srv/otherone"


def test_worker_health_metrics_replicas_and_stop_grace(worker_settings: Settings) -> None:
    worker = services()["worker"]
    env = {
        key: value
        for instruction in final_stage(WORKER_DOCKERFILE)
        if instruction.keyword == "ENV"
        for key, value in re.findall(r"(\w+)=(\S+)", instruction.arguments)
    }
    assert str(worker_settings.health_file) == env["OTHERONE_HEALTH_FILE"]
    command = worker["healthcheck"]["test"]
    assert command[:3] == ["CMD", "python", "-P"]
    assert command[3] == healthcheck_script_in_image()

    assert worker_settings.metrics_host == "0.0.0.0"
    assert worker_settings.metrics_port == collector_scrape_port()
    assert "ports" not in worker  # replicas cannot share host ports; nothing to publish
    assert worker["init"] is True
    # Read-only root file system: the health file must be on the tmpfs.
    assert worker["read_only"] is True and worker["cap_drop"] == ["ALL"]
    assert any(str(worker_settings.health_file).startswith(f"{tmp}/") for tmp in worker["tmpfs"])

    assert int(worker["deploy"]["replicas"]) >= 2
    assert int(services({"WORKER_REPLICAS": "5"})["worker"]["deploy"]["replicas"]) == 5
    grace = seconds(worker["stop_grace_period"])
    assert grace >= worker_settings.shutdown_grace_seconds + ABANDON_AFTER_SECONDS + 5


# --------------------------------------------------------------------------- the collector


def collector_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())
    return config


def collector_scrape_port() -> int:
    (scrape,) = collector_config()["receivers"]["prometheus"]["config"]["scrape_configs"]
    (discovery,) = scrape["dns_sd_configs"]
    assert discovery["names"] == ["worker"]  # every replica of the worker service
    return int(discovery["port"])


def test_collector_is_optional_and_wired() -> None:
    collector = services()["otel-collector"]
    assert collector["profiles"] == ["otel"]
    assert "otel-collector" not in {
        dep for service in services().values() for dep in service.get("depends_on", {})
    }
    ((source, target, _),) = bind_mounts(collector)
    assert (REPO / source).resolve() == (DEPLOY / "otel-collector.yaml").resolve()
    (cmd,) = [i for i in final_stage(COLLECTOR_DOCKERFILE) if i.keyword == "CMD"]
    assert cmd.exec_form() == ["--config", target]

    config = collector_config()
    health = config["extensions"]["health_check"]["endpoint"].rpartition(":")[2]
    assert collector["healthcheck"]["test"][-1] == f"http://127.0.0.1:{health}/"
    bases = [i.arguments for i in final_stage(COLLECTOR_DOCKERFILE) if i.keyword == "FROM"]
    assert bases[0].startswith("busybox:")  # has the healthcheck's wget
    otlp = config["receivers"]["otlp"]["protocols"]["http"]["endpoint"].rpartition(":")[2]
    assert f"http://otel-collector:{otlp}" in COMPOSE_FILE.read_text()  # the documented endpoint
    used: set[str] = set(config["service"]["extensions"])
    for pipeline in config["service"]["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            assert set(pipeline[kind]) <= set(config[kind]), pipeline
            used.update(pipeline[kind])
    defined = {
        name
        for kind in ("receivers", "processors", "exporters", "extensions")
        for name in config[kind]
    }
    assert defined == used, f"defined but unused: {defined - used}"


# --------------------------------------------------------------------------- the worker image


def healthcheck_script_in_image() -> str:
    """Where the Dockerfile puts worker/health.py in the final image."""
    copies = [
        i.arguments.split()
        for i in final_stage(WORKER_DOCKERFILE)
        if i.keyword == "COPY" and "worker/health.py" in i.arguments.split()
    ]
    assert len(copies) == 1, copies
    return copies[0][-1]


def test_image_installs_every_package_of_pyproject() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {
        pattern.rstrip("*")
        for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    build = [i for i in WORKER_DOCKERFILE if i.stage == 0]
    copied = {part for i in build if i.keyword == "COPY" for part in i.arguments.split()[:-1]}
    missing = packages - copied
    assert not missing, f"Dockerfile does not copy packages {missing}: the image would lack them"
    assert {"pyproject.toml", "README.md"} <= copied
    assert any(i.keyword == "RUN" and "pip install ." in i.arguments for i in build)
    assert "otherone" in pyproject["project"]["scripts"]


def test_image_runs_the_worker_as_a_non_root_user_that_receives_sigterm() -> None:
    final = final_stage(WORKER_DOCKERFILE)
    by_keyword = {i.keyword: i for i in final}
    assert by_keyword["CMD"].exec_form() == ["otherone", "worker"]  # no shell in between
    assert by_keyword["USER"].arguments not in ("root", "0")
    assert by_keyword["STOPSIGNAL"].arguments == "SIGTERM"
    healthcheck = by_keyword["HEALTHCHECK"].arguments
    options, _, command = healthcheck.partition("CMD ")
    assert json.loads(command) == ["python", "-P", healthcheck_script_in_image()]
    assert "--start-period" in options
    assert (REPO / "worker" / "health.py").is_file()
    assert any(i.keyword == "COPY" and "--from=build" in i.arguments for i in final)


def test_dockerignore_keeps_secrets_and_local_state_out_of_the_image() -> None:
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".env", ".venv", ".git", ".otherone", "*.db"} <= ignored


# --------------------------------------------------------------------------- setup script, live


async def test_setup_script_creates_the_namespace_and_registers_the_attributes(
    temporal_env: WorkflowEnvironment, client: Client, tmp_path: Path
) -> None:
    namespace = f"deploy-{uuid4().hex[:12]}"
    job = environment(services()["temporal-setup"])
    binary = find_temporal_binary()
    env = {
        "PATH": f"{binary.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),  # the temporal CLI may look for its config file there
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "NAMESPACE": namespace,
        "NAMESPACE_RETENTION": "72h",
        "OTHERONE_SEARCH_ATTRIBUTES": job["OTHERONE_SEARCH_ATTRIBUTES"],
        "SETUP_ATTEMPTS": "30",
        "SETUP_PAUSE_SECONDS": "1",
    }
    script = DEPLOY / "temporal" / "setup-namespace.sh"

    async def run_script() -> str:
        process = await asyncio.create_subprocess_exec(
            "sh",
            str(script),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(process.communicate(), 90)
        assert process.returncode == 0, output.decode()
        return output.decode()

    first = await run_script()
    assert "temporal-setup: done" in first
    described = await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=namespace)
    )
    assert described.config.workflow_execution_retention_ttl.ToSeconds() == 72 * 3600
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    for key in CUSTOM_SEARCH_ATTRIBUTES:
        assert listed.custom_attributes.get(key.name) == key.indexed_value_type.value, key.name

    again = await run_script()  # idempotent: a second `docker compose up` changes nothing
    assert "waiting" not in again, again


# --------------------------------------------------------------------------- worker settings


def cli(*args: str, env: Mapping[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("OTHERONE_")}
    return subprocess.run(
        [sys.executable, "-m", "otherone.client.cli", *args],
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("OTHERONE_MAX_CONCURRENT_ACTIVITIES", "abc", "--max-concurrent-activities"),
        ("OTHERONE_SHUTDOWN_GRACE_SECONDS", "-1", "greater than or equal to 0"),
        ("OTHERONE_TRACING", "maybe", "boolean"),
        # Both became a timedelta: infinity crashed the worker (after its ready line).
        ("OTHERONE_SHUTDOWN_GRACE_SECONDS", "inf", "less than or equal to"),
        ("OTHERONE_EVENT_RETENTION_HOURS", "1e300", "less than or equal to"),
        ("OTHERONE_RECONCILE_SECONDS", "inf", "less than or equal to"),
        # Not a port: an "unexpected OverflowError" from bind().
        ("OTHERONE_TEMPORAL_PORT", "70000", "less than 65536"),
        ("OTHERONE_UI_PORT", "-5", "greater than 0"),
    ],
)
def test_a_bad_setting_exits_2_with_one_line_naming_the_variable(
    variable: str, value: str, named: str
) -> None:
    result = cli("worker", env={variable: value})
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert variable in lines[0] and named in lines[0] and repr(value) in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def test_a_bad_setting_in_a_dot_env_file_is_reported_the_same_way(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("OTHERONE_SHUTDOWN_GRACE_SECONDS=soon\n")
    result = cli("worker", env={}, cwd=tmp_path)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: OTHERONE_SHUTDOWN_GRACE_SECONDS: "), lines[0]
    assert lines[0].endswith("number (got 'soon')"), lines[0]


def test_a_dot_env_file_that_is_not_utf8_is_one_line_even_for_help(tmp_path: Path) -> None:
    """It was a traceback (UnicodeDecodeError), for `--help` too."""
    (tmp_path / ".env").write_bytes(b"OTHERONE_PARTITION=\xff\xfe\n")
    result = cli("sessions", env={}, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result
    assert (
        result.stderr.strip() == "error: file .env: not UTF-8 text (invalid start byte at byte 19)"
    )
    assert cli("--help", env={}, cwd=tmp_path).returncode == 0


def test_a_data_dir_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    """A read-only folder or a file in the way was "unexpected OSError", exit 1."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = cli("db", "upgrade", "--data-dir", str(blocker / "sub"), env={}, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result
    assert "cannot create the store's directory" in result.stderr
    assert "--data-dir" in result.stderr


def test_an_empty_variable_means_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTHERONE_MAX_CONCURRENT_ACTIVITIES", "")
    monkeypatch.setenv("OTHERONE_SHUTDOWN_GRACE_SECONDS", "")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert (
        settings.max_concurrent_activities
        == Settings.model_fields["max_concurrent_activities"].default
    )
    assert settings.shutdown_grace_seconds == 30.0


def test_settings_sources_in_order_of_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keyword argument > environment variable > .env > .otherone/dev.env > default, as
    pydantic-settings had it (the loader is ours since issue 16): names in any case, an empty
    value unset, a bare name in a later file unsetting an earlier file's value."""
    monkeypatch.chdir(tmp_path)
    for name in ("NAMESPACE", "TASK_QUEUE", "PARTITION", "UI_PORT", "LOG_LEVEL", "UI_URL"):
        monkeypatch.delenv(f"OTHERONE_{name}", raising=False)
    (tmp_path / ".otherone").mkdir()
    (tmp_path / ".otherone" / "dev.env").write_text(
        "OTHERONE_NAMESPACE=from-dev\nOTHERONE_TASK_QUEUE=from-dev\nOTHERONE_PARTITION=from-dev\n"
        "OTHERONE_UI_PORT=9000\nOTHERONE_UI_URL=http://dev\n"
    )
    (tmp_path / ".env").write_text(
        "otherone_task_queue=from-dot-env\nOTHERONE_PARTITION=from-dot-env\nOTHERONE_UI_PORT=\n"
        "OTHERONE_UI_URL\nNAMESPACE=not-ours\n"
    )
    monkeypatch.setenv("OTHERONE_PARTITION", "from-environment")
    monkeypatch.setenv("Otherone_Log_Level", "debug")
    settings = Settings(task_queue="from-argument")
    assert settings.namespace == "from-dev"
    assert settings.task_queue == "from-argument"
    assert settings.partition == "from-environment"
    assert settings.ui_port == 9000  # empty in .env: dev.env's holds
    assert settings.ui_url is None  # a bare name in .env unsets dev.env's
    assert settings.log_level == "DEBUG"
    assert Settings().task_queue == "from-dot-env"
    assert Settings(_env_file=None).namespace == "default"  # type: ignore[call-arg]
    only_dev = Settings(_env_file=tmp_path / ".otherone" / "dev.env")  # type: ignore[call-arg]
    assert only_dev.task_queue == "from-dev"


@pytest.mark.parametrize("command", ["worker", "dev"])
def test_help_documents_every_setting(command: str) -> None:
    result = cli(command, "--help", env={})
    assert result.returncode == 0, result.stderr
    for name, info in Settings.model_fields.items():
        variable = f"OTHERONE_{name.upper()}"
        assert variable in result.stdout, f"{command} --help does not mention {variable}"
        assert info.description, f"Settings.{name} has no description for the help"
        first_words = " ".join(info.description.split()[:3])
        assert first_words in " ".join(result.stdout.split()), (name, first_words)
