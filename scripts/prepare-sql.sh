#!/usr/bin/env bash
# docflow's SQL, checked at compile time against the schema the migrations
# make (`sqlx::query!`, `query_as!`, `query_scalar!` in the server crate).
#
#   scripts/prepare-sql.sh           rewrites .sqlx/, the query descriptions an
#                                    ordinary (offline) build reads; run it
#                                    after changing a query or a migration,
#                                    and commit .sqlx/
#   scripts/prepare-sql.sh --check DIR
#                                    compares the descriptions an online build
#                                    wrote to DIR (SQLX_OFFLINE_DIR) with .sqlx/:
#                                    what scripts/test.sh runs after its build
#
# The online build itself is the schema check: a query naming a column a
# migration renamed or dropped fails to compile.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --check ]; then
  built=$2
  if [ -z "$(ls -A "$built")" ]; then
    echo "the server crate was not rebuilt: its queries were checked by an earlier build"
    exit 0
  fi
  status=0
  for file in "$built"/query-*.json; do
    name=$(basename "$file")
    if [ ! -f ".sqlx/$name" ]; then
      echo "not in .sqlx/ (a new or changed query): $name" >&2
      status=1
    elif ! cmp -s "$file" ".sqlx/$name"; then
      echo "out of date in .sqlx/ (the schema changed what it returns): $name" >&2
      status=1
    fi
  done
  for file in .sqlx/query-*.json; do
    [ -e "$file" ] || continue
    name=$(basename "$file")
    if [ ! -f "$built/$name" ]; then
      echo "in .sqlx/ but no longer a query: $name" >&2
      status=1
    fi
  done
  if [ $status -ne 0 ]; then
    echo "the committed query descriptions are stale: run scripts/prepare-sql.sh and commit .sqlx/" >&2
  else
    echo "$(ls "$built" | wc -l) queries checked against the migrations; .sqlx/ is current"
  fi
  exit $status
fi

url=$(scripts/sql-schema.sh)
rm -f .sqlx/query-*.json
mkdir -p .sqlx
# Every query macro runs again only when the crate compiles again.
touch server/src/lib.rs
DATABASE_URL=$url SQLX_OFFLINE=false SQLX_OFFLINE_DIR=$(pwd)/.sqlx \
  cargo test --workspace --no-run --lib
echo "$(ls .sqlx | wc -l) query descriptions written to .sqlx/"
