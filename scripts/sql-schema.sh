#!/usr/bin/env bash
# (Re)creates the database docflow's SQL is checked against at compile time
# (`sqlx::query!` and friends, online) from the migrations, and prints its
# URL. Used by scripts/check-sql.sh and scripts/test.sh; the database holds
# only the schema, never data.
set -euo pipefail
cd "$(dirname "$0")/.."
db=${DOCFLOW_SQL_SCHEMA_DB:-docflow_sql_schema}
export PGOPTIONS="-c client_min_messages=warning"
psql=(psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -q)
"${psql[@]}" -d postgres -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null
"${psql[@]}" -d postgres -c "CREATE DATABASE \"$db\"" >/dev/null
# In order, each file on its own, as sqlx's migrator applies them.
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
for file in migrations/*.sql; do
  "${psql[@]}" -d "$db" -f "$file" >/dev/null 2>"$errors" || {
    echo "migration $file failed:" >&2
    cat "$errors" >&2
    exit 1
  }
done
echo "postgres://postgres@127.0.0.1:5432/$db"
