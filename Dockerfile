# Otherone worker image: runs `otherone worker` against an external Temporal server.
# Built by docker-compose.yml (service `worker`); configuration comes from OTHERONE_* env vars
# and the TOML file named by OTHERONE_CONFIG.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Copy only what the package needs (keeps .venv, .git and local data out of the image).
COPY pyproject.toml README.md ./
COPY otherone ./otherone
COPY workflows ./workflows
COPY activities ./activities
COPY worker ./worker
COPY client ./client
RUN pip install .

RUN useradd --create-home --uid 10001 otherone
USER otherone

CMD ["otherone", "worker"]
