#!/usr/bin/env bash
# A scratch PostgreSQL server on loopback, for tests and benchmarks (never for production).
#
#   scripts/postgres.sh start <dir> [port]   initialise <dir> if new, start, print the URL
#   scripts/postgres.sh stop <dir>           stop the server of <dir>
#
# Uses Debian's postgresql package (apt-get install -y postgresql). Run as root, the server
# runs as the postgres user (initdb refuses root). The role is agentforest/agentforest and
# TCP logins need that password (scram-sha-256).
set -euo pipefail
cmd=${1:?start or stop}
dir=${2:?data directory}
port=${3:-55432}

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bin" ] && command -v pg_ctl >/dev/null; then bin=$(dirname "$(command -v pg_ctl)"); fi
if [ -z "$bin" ]; then
  echo "postgres.sh: no PostgreSQL found; install it with: apt-get install -y postgresql" >&2
  exit 3
fi

as_server() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; chmod 700 "$dir"; fi
    if [ ! -f "$dir/PG_VERSION" ]; then
      pw=$(mktemp)
      echo agentforest > "$pw"
      chmod 644 "$pw"
      as_server "$bin/initdb" -D "$dir" -U agentforest --pwfile="$pw" --auth=scram-sha-256 -E UTF8 >/dev/null
      rm -f "$pw"
    fi
    as_server "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
    echo "postgres://agentforest:agentforest@127.0.0.1:$port/postgres"
    ;;
  stop)
    as_server "$bin/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
    ;;
  *)
    echo "postgres.sh: unknown command $cmd (start or stop)" >&2
    exit 2
    ;;
esac
