#!/usr/bin/env bash
# Makes the pgvector extension (`CREATE EXTENSION vector`) available to the
# local PostgreSQL on 127.0.0.1:5432. Debian 12 ships no pgvector binary, so
# this builds Debian 13's (trixie) source package against the installed
# server: it adds a deb-src line for trixie (source only: every binary package
# stays Debian 12's), installs postgresql-server-dev-<major>, fetches the
# source with apt-get and runs make && make install. Idempotent: does nothing
# when the server already offers the extension.
set -euo pipefail
say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
psql_pg() { psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -Atqc "$1"; }
available() { [ "$(psql_pg "SELECT 1 FROM pg_available_extensions WHERE name='vector'")" = 1 ]; }

psql_pg 'SELECT 1' >/dev/null || { echo "PostgreSQL is not reachable on 127.0.0.1:5432 as postgres" >&2; exit 1; }
if available; then
  say "pgvector already available ($(psql_pg "SELECT default_version FROM pg_available_extensions WHERE name='vector'"))"
  exit 0
fi

# The installed major version: the cluster listening on 5432 if several are
# configured, else the newest.
major=""
newest=""
for dir in /etc/postgresql/*/; do
  [ -d "$dir" ] || continue
  v=$(basename "$dir")
  newest=$(printf '%s\n' "$newest" "$v" | sort -V | tail -1)
  if grep -qsE '^\s*port\s*=\s*5432\b' "$dir"/*/postgresql.conf; then major=$v; fi
done
[ -n "$major" ] || major=$newest
[ -n "$major" ] || { echo "no PostgreSQL found under /etc/postgresql" >&2; exit 1; }
pg_config=/usr/lib/postgresql/$major/bin/pg_config
say "building pgvector for PostgreSQL $major"

if ! grep -rqsE '^\s*deb-src\s.*\strixie\s+main' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  say "adding a deb-src line for trixie ($uri)"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" |
    as_root tee /etc/apt/sources.list.d/trixie-src.list >/dev/null
fi

say "apt-get update"
as_root apt-get update -qq
pkgs=("postgresql-server-dev-$major")
command -v make >/dev/null || pkgs+=(make)
command -v gcc >/dev/null || pkgs+=(gcc)
say "installing ${pkgs[*]}"
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${pkgs[@]}" >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Run as root, apt downloads as its _apt user, which must own the folder.
if [ "$(id -u)" = 0 ] && id _apt >/dev/null 2>&1; then chown _apt "$work"; fi
cd "$work"
say "downloading the pgvector source (trixie)"
apt-get source -qq --download-only pgvector/trixie
tar xf pgvector_*.orig.tar.*
cd pgvector-*/
say "make ($(basename "$(pwd)"))"
make -s PG_CONFIG="$pg_config" >/dev/null
say "make install"
as_root make -s PG_CONFIG="$pg_config" install >/dev/null

if available; then
  say "pgvector $(psql_pg "SELECT default_version FROM pg_available_extensions WHERE name='vector'") is available"
else
  echo "pgvector was installed but the server on 127.0.0.1:5432 does not offer it" >&2
  exit 1
fi
