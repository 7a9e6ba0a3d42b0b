#!/usr/bin/env bash
# Drops the databases and RabbitMQ vhosts that earlier test runs left behind,
# and the tests' template databases, so that a run builds its templates from
# the migrations and seeding code it tests.
set -euo pipefail
for db in $(psql -h 127.0.0.1 -U postgres -Atc "SELECT datname FROM pg_database WHERE datname LIKE 'docflow\_t\_%' OR datname LIKE 'docflow\_tpl\_%' OR datname LIKE 'docflow\_e2e%'"); do
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null
done
# Tests remove their own on success; these are from failed or killed runs.
# Each vhost holds file handles in RabbitMQ, and vhost creation blocks when
# they run out, so none may pile up.
for vhost in $(timeout 60 rabbitmqctl -q list_vhosts name | grep -E '^docflow-(t-|e2e)' || true); do
  timeout 60 rabbitmqctl -q delete_vhost "$vhost" >/dev/null
done
# The local cluster of the cluster test (scripts/cluster.sh), if a run left it.
"$(dirname "$0")/cluster.sh" down
