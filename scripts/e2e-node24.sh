#!/usr/bin/env bash
# The end-to-end tests under Node 24, the current LTS, taken from the npm registry
# (node-<platform>-<arch>@24, the package the registry's `node` package installs, which carries
# the binary and its headers; no system install). They run in a scratch copy of the checkout
# where `npm ci` runs under Node 24, so better-sqlite3 is built against Node 24's own headers
# and this tree's node_modules (built for the Node that runs everything else) is left as it is.
#
#   bash scripts/e2e-node24.sh [vitest args...]     default: test/e2e
set -euo pipefail
project=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/agentforest-node24-XXXXXX")
trap 'rm -rf "$work"' EXIT

package="node-$(node -p process.platform)-$(node -p process.arch)"
npm install --prefix "$work/node24" --no-save --no-package-lock --no-audit --no-fund --loglevel=error "$package@24"
node24="$work/node24/node_modules/$package"
[ -x "$node24/bin/node" ] && [ -f "$node24/include/node/node_version.h" ] || { echo "$package@24 has no bin/node or include/node" >&2; exit 1; }
export PATH="$node24/bin:$PATH" npm_config_nodedir="$node24"
echo "node $(node --version) from the npm registry ($package); native addons build against its headers"

mkdir "$work/checkout"
tar -C "$project" --exclude=./node_modules --exclude=./.git --exclude=./dist -c . | tar -C "$work/checkout" -x
cd "$work/checkout"
npm ci --no-audit --no-fund --loglevel=error
if [ $# -eq 0 ]; then set -- test/e2e; fi
npx vitest run "$@"
