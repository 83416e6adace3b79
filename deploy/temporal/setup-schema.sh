#!/bin/sh
# Create or upgrade the schemas of Temporal's own databases (`temporal`, `temporal_visibility`)
# on the PostgreSQL server `temporal-db`: the `temporal-schema` job of docker-compose.yml, run
# with the temporalio/admin-tools image before the server starts. Idempotent: `create` and
# `setup-schema` leave existing databases alone, `update-schema` applies only missing versions
# (this is how a Temporal upgrade migrates its schema: bump both image tags, `docker compose up`).
# These are the steps of Temporal's reference compose setup (temporalio/samples-server, compose/).
set -eu

: "${POSTGRES_SEEDS:?set POSTGRES_SEEDS (host of Temporal's PostgreSQL)}"
: "${POSTGRES_USER:?set POSTGRES_USER}"
: "${SQL_PASSWORD:?set SQL_PASSWORD (password of POSTGRES_USER)}"
PORT="${DB_PORT:-5432}"
SCHEMA_DIR=/etc/temporal/schema/postgresql/v12

echo "temporal-schema: waiting for PostgreSQL at ${POSTGRES_SEEDS}:${PORT}"
nc -z -w 10 "${POSTGRES_SEEDS}" "${PORT}"

sql_tool() {
    temporal-sql-tool --plugin postgres12 --ep "${POSTGRES_SEEDS}" -u "${POSTGRES_USER}" \
        -p "${PORT}" "$@"
}

for database in temporal temporal_visibility; do
    case "${database}" in
        temporal) versions="${SCHEMA_DIR}/temporal/versioned" ;;
        *) versions="${SCHEMA_DIR}/visibility/versioned" ;;
    esac
    echo "temporal-schema: ${database}"
    sql_tool --db "${database}" create
    sql_tool --db "${database}" setup-schema -v 0.0
    sql_tool --db "${database}" update-schema -d "${versions}"
done
echo "temporal-schema: done"
