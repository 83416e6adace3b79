# Otherone worker image: `otherone worker` against an external Temporal server.
# Built by docker-compose.yml (service `worker`); configured only through OTHERONE_* environment
# variables (`otherone worker --help` lists them) and the TOML file OTHERONE_CONFIG names.
# Operations (scaling, upgrades, security): docs/operations.md.

# --- build: install the package and its dependencies into a virtualenv -------------------------
FROM python:3.11.11-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /opt/venv
WORKDIR /src
# Only what the package needs: .dockerignore keeps .venv, .git, .env and local data out of the
# build context, and nothing else of the repository is copied.
COPY pyproject.toml README.md ./
COPY otherone ./otherone
COPY workflows ./workflows
COPY activities ./activities
COPY store ./store
COPY worker ./worker
COPY client ./client
COPY api ./api
RUN /opt/venv/bin/pip install .

# --- runtime: the virtualenv, a non-root user, nothing to build with ---------------------------
FROM python:3.11.11-slim-bookworm

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OTHERONE_HEALTH_FILE=/tmp/otherone-worker.alive

COPY --from=build /opt/venv /opt/venv
# The healthcheck runs this file as a plain script (standard library only, a few milliseconds).
COPY worker/health.py /opt/otherone/healthcheck.py

RUN useradd --create-home --uid 10001 --user-group otherone \
    && mkdir -p /app/config \
    && chown otherone:otherone /app
WORKDIR /app
USER otherone

# Mount the runtime configuration (OTHERONE_CONFIG) at /app/config (docker-compose.yml does);
# tools modules in the same folder are importable. Without it the example configuration runs.

# SIGTERM drains in-flight activities for OTHERONE_SHUTDOWN_GRACE_SECONDS, then exits 0: give
# `docker stop` / Kubernetes at least that plus ~15 s (terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-P", "/opt/otherone/healthcheck.py"]

# Exec form: the worker is PID 1's child under `init: true`, or PID 1 itself; either way it
# receives SIGTERM directly (no shell in between).
CMD ["otherone", "worker"]
