#!/bin/sh
# Create Otherone's Temporal namespace (if missing) and register Otherone's custom search
# attributes on it (those missing): the `temporal-setup` job of docker-compose.yml, run with the
# temporalio/admin-tools image once the server answers. Workers start only after it succeeded:
# a workflow that upserts an unregistered search attribute fails its workflow task for ever.
# Idempotent, so every `docker compose up` runs it; tests/test_deployment.py runs it against a
# real dev server. Needs `sh`, `grep` and the `temporal` CLI.
#
#   TEMPORAL_ADDRESS             host:port of the frontend (read by the temporal CLI)
#   NAMESPACE                    namespace to create and use (default: default)
#   NAMESPACE_RETENTION          how long closed workflows are kept, e.g. 168h (default: 168h)
#   OTHERONE_SEARCH_ATTRIBUTES   "Name=Type ..." (otherone/search_attributes.py)
#   SETUP_ATTEMPTS               tries per step while the server warms up (default: 60)
#   SETUP_PAUSE_SECONDS          pause between tries (default: 2)
set -eu

: "${TEMPORAL_ADDRESS:?set TEMPORAL_ADDRESS (host:port of the Temporal frontend)}"
: "${OTHERONE_SEARCH_ATTRIBUTES:?set OTHERONE_SEARCH_ATTRIBUTES (Name=Type ...)}"
NAMESPACE="${NAMESPACE:-default}"
RETENTION="${NAMESPACE_RETENTION:-168h}"
ATTEMPTS="${SETUP_ATTEMPTS:-60}"
PAUSE="${SETUP_PAUSE_SECONDS:-2}"

# retry WHAT COMMAND...: run COMMAND until it succeeds, at most ATTEMPTS times.
retry() {
    what="$1"
    shift
    attempt=1
    until "$@"; do
        if [ "${attempt}" -ge "${ATTEMPTS}" ]; then
            echo "temporal-setup: gave up after ${ATTEMPTS} attempts: ${what}" >&2
            return 1
        fi
        echo "temporal-setup: waiting (${attempt}/${ATTEMPTS}): ${what}"
        attempt=$((attempt + 1))
        sleep "${PAUSE}"
    done
}

serving() {
    temporal operator cluster health >/dev/null 2>&1
}

namespace_exists() {
    temporal operator namespace describe --namespace "${NAMESPACE}" >/dev/null 2>&1
}

ensure_namespace() {
    namespace_exists && return 0
    temporal operator namespace create --namespace "${NAMESPACE}" --retention "${RETENTION}" \
        >/dev/null || true
    namespace_exists
}

registered() {
    temporal operator search-attribute list --namespace "${NAMESPACE}" 2>/dev/null \
        | grep -qw -- "$1"
}

# ensure_attribute NAME TYPE. A new namespace may be unknown to the frontend's cache for a few
# seconds ("namespace not found"): the retry covers that.
ensure_attribute() {
    registered "$1" && return 0
    temporal operator search-attribute create --namespace "${NAMESPACE}" --name "$1" \
        --type "$2" >/dev/null || true
    registered "$1"
}

retry "Temporal at ${TEMPORAL_ADDRESS} to serve" serving
retry "namespace ${NAMESPACE}" ensure_namespace
echo "temporal-setup: namespace ${NAMESPACE} ready"
for attribute in ${OTHERONE_SEARCH_ATTRIBUTES}; do
    name="${attribute%%=*}"
    type="${attribute#*=}"
    retry "search attribute ${name} (${type})" ensure_attribute "${name}" "${type}"
    echo "temporal-setup: search attribute ${name} (${type}) registered"
done
echo "temporal-setup: done"
