#!/usr/bin/env bash
# npm run test:container — builds the Dockerfile for real and checks the image end to end with
# podman (not part of `npm test`). Steps, each failing with a clear message at the first break:
#   locate the shared container-base.sh; prepare podman and the base images with it; build the
#   image and check its user, health check, port and volume, print its size; without
#   AGENTFOREST_API_KEYS the container refuses to start (exit 78, a clear message); SIGTERM right
#   after start-up begins still stops it promptly; run it (node as PID 1, no --init) with a data
#   volume and time start-to-healthy; the process has a non-zero uid; smoke over HTTP (root,
#   continuable child via spawn_subagent, quiet report, session read); the forest view's page and
#   assets served without a key; SIGTERM: an open long-poll
#   ends, the logs show the drain, exit 0 promptly; a new container (with --init) on the same
#   volume: the root resumes with its whole session and goes on; SIGTERM through the init.
# Cleanup (on success, failure, Ctrl-C or the overall time limit): the containers (with their
# anonymous volumes), the data volume
# and the image tag this run created. Base images and build-stage layer cache are kept, so a
# second run rebuilds only what changed (`podman image prune` drops the cache).
#
# Environment:
#   AGENTFOREST_CONTAINER_BASE     path of container-base.sh (default: <repo>/../shared/tools/container-base.sh)
#   AGENTFOREST_CONTAINER_TIMEOUT  overall limit in seconds (default 1200)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
limit=${AGENTFOREST_CONTAINER_TIMEOUT:-1200}

# The whole run lives under `timeout`: at the limit every process of the run gets SIGTERM,
# this script reports the limit and its EXIT trap cleans up.
if [ -z "${AF_TEST_CONTAINER_INNER:-}" ]; then
  export AF_TEST_CONTAINER_INNER=1
  exec timeout --kill-after=60 "$limit" bash "${BASH_SOURCE[0]}" "$@"
fi

now_ms() { date +%s%3N; }
started=$(now_ms)
step_no=0
step() { step_no=$((step_no + 1)); printf '\n==> [%d] %s\n' "$step_no" "$*"; }
ok() { printf '    ok: %s\n' "$*"; }
fail() {
  printf '\nFAIL (step %d): %s\n' "$step_no" "$*" >&2
  exit 1
}
secs() { awk -v ms="$1" 'BEGIN { printf "%.2f", ms / 1000 }'; }

run_id="$$-$(date +%s)"
tag="localhost/agentforest:test-container-$run_id"
volume="agentforest-test-data-$run_id"
key="test-container-key-$run_id"
tmp=$(mktemp -d)
containers=()
served=() # containers whose last log lines help when a step fails
built=0
volume_made=0

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [ "$rc" != 0 ] && [ "${#served[@]}" -gt 0 ]; then
    for c in "${served[@]}"; do
      if podman container exists "$c" 2>/dev/null; then
        printf '\n--- last log lines of %s ---\n' "$c" >&2
        podman logs --tail 12 "$c" >&2 2>&1
      fi
    done
  fi
  printf '\n==> cleanup\n'
  for c in "${containers[@]}"; do
    podman rm -f -v -t 0 "$c" >/dev/null 2>&1 && echo "    removed container $c"
  done
  if [ "$volume_made" = 1 ]; then podman volume rm -f "$volume" >/dev/null 2>&1 && echo "    removed volume $volume"; fi
  if [ "$built" = 1 ]; then podman rmi -f "$tag" >/dev/null 2>&1 && echo "    removed image $tag"; fi
  rm -rf "$tmp"
  printf '    total %ss, exit %s\n' "$(secs $(($(now_ms) - started)))" "$rc"
  exit "$rc"
}
trap cleanup EXIT
trap 'fail "interrupted, or the overall limit of ${limit}s (AGENTFOREST_CONTAINER_TIMEOUT) was reached"' INT TERM

# ---------- JSON and HTTP helpers (node is on PATH wherever npm runs) ----------
# jget JSON EXPR: prints EXPR evaluated with r = the parsed JSON (strings raw, others as JSON);
# fails when it throws or is undefined.
jget() {
  node -e '
    const r = JSON.parse(process.argv[1]);
    const v = new Function("r", `return (${process.argv[2]});`)(r);
    if (v === undefined) process.exit(3);
    console.log(typeof v === "string" ? v : JSON.stringify(v));
  ' "$1" "$2" 2>/dev/null || fail "no ${2} in: ${1:0:600}"
}
# check JSON EXPR WHAT: EXPR must be true.
check() {
  [ "$(jget "$1" "$2")" = true ] || fail "$3: expected ${2} to hold in: ${1:0:800}"
  ok "$3"
}
base=""
code=""
body=""
# http METHOD PATH [BODY] [AGENT_TOKEN]: every /v1 route needs the operator key (keys are set).
http() {
  local args=(-sS -o "$tmp/body" -w '%{http_code}' --max-time 30 -X "$1" "$base$2" -H "authorization: Bearer $key")
  if [ -n "${3:-}" ]; then args+=(-H 'content-type: application/json' --data "$3"); fi
  if [ -n "${4:-}" ]; then args+=(-H "x-agent-token: $4"); fi
  code=$(curl "${args[@]}" 2>"$tmp/curl.err") || fail "$1 $2: no HTTP answer ($(cat "$tmp/curl.err"))"
  body=$(cat "$tmp/body")
}
expect() { [ "$code" = "$1" ] || fail "$2: expected HTTP $1, got $code: ${body:0:600}"; }

# ---------- container helpers ----------
running() { [ "$(podman inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" = true ]; }
# start NAME START_MS [podman run options...]: runs the image detached on a free loopback port
# with the volume and key; waits until `podman healthcheck run` passes (there is no systemd
# timer here, so the check is polled); sets base and healthy_ms.
healthy_ms=0
start() {
  local name=$1 t0=$2
  shift 2
  containers+=("$name")
  served+=("$name")
  podman run -d --name "$name" -p 127.0.0.1::3000 -v "$volume":/data -e AGENTFOREST_API_KEYS="$key" "$@" "$tag" \
    >"$tmp/run.out" 2>"$tmp/run.err" || fail "podman run $name failed: $(grep -v 'systemd' "$tmp/run.err")"
  local deadline=$(($(now_ms) + 60000))
  until podman healthcheck run "$name" >/dev/null 2>&1; do
    running "$name" || fail "$name exited before it was healthy (exit code $(podman inspect -f '{{.State.ExitCode}}' "$name"))"
    [ "$(now_ms)" -lt "$deadline" ] || fail "$name not healthy within 60 s (podman healthcheck run keeps failing)"
    sleep 0.1
  done
  healthy_ms=$(($(now_ms) - t0))
  local hostport
  hostport=$(podman port "$name" 3000/tcp | head -n1)
  [ -n "$hostport" ] || fail "$name publishes no port for 3000/tcp"
  base="http://$hostport"
}
# stop_with_sigterm NAME: SIGTERM, then waits up to 30 s; checks exit 0 and the drain in the
# logs; sets stop_ms (signal sent to container exited).
stop_ms=0
stop_with_sigterm() {
  local name=$1 t0 rc
  t0=$(now_ms)
  podman kill --signal TERM "$name" >/dev/null || fail "podman kill --signal TERM $name failed"
  rc=$(timeout 30 podman wait "$name") || fail "$name did not exit within 30 s of SIGTERM"
  stop_ms=$(($(now_ms) - t0))
  podman logs "$name" >"$tmp/$name.log" 2>&1
  [ "$rc" = 0 ] || fail "$name exited with code $rc after SIGTERM (expected 0)"
  ok "exit code 0"
  grep -q '"msg":"draining: ' "$tmp/$name.log" || fail "$name's logs have no 'draining: ...' line after SIGTERM"
  grep -q '"msg":"drained and closed"' "$tmp/$name.log" || fail "$name's logs have no 'drained and closed' line after SIGTERM"
  ok "logs show 'draining: ...' then 'drained and closed'"
  [ "$stop_ms" -lt 5000 ] || fail "$name took $(secs "$stop_ms") s to exit after SIGTERM with nothing in flight (limit 5 s)"
  ok "exited $(secs "$stop_ms") s after SIGTERM"
}
# program NAME PID: the program a process of the container runs (its argv[0] without the
# folder). Not /proc/PID/comm: Node 22 and later name their main thread "MainThread" there.
program() { podman exec "$1" sh -c "basename \"\$(tr '\\0' '\\n' < /proc/$2/cmdline | head -n 1)\""; }
# node_uid NAME: the uid of the container's node process (PID 1 or not).
node_uid() { podman exec "$1" sh -c 'for p in /proc/[0-9]*; do [ "$(basename "$(tr "\\0" "\\n" < $p/cmdline 2>/dev/null | head -n 1)")" = node ] && awk "/^Uid:/{print \$2; exit}" $p/status && exit; done'; }

# ================================================================================
step "locate the shared container-base.sh"
base_script=${AGENTFOREST_CONTAINER_BASE:-$repo/../shared/tools/container-base.sh}
[ -f "$base_script" ] || fail "container-base.sh not found at $base_script; set AGENTFOREST_CONTAINER_BASE=/path/to/container-base.sh"
base_script=$(cd "$(dirname "$base_script")" && pwd)/$(basename "$base_script")
ok "$base_script"

step "prepare podman and the base images (container-base.sh; ~1-2 min the first time)"
t=$(now_ms)
bash "$base_script" >"$tmp/base.log" 2>&1 || { tail -n 30 "$tmp/base.log" >&2; fail "container-base.sh failed (last lines above)"; }
# shellcheck source=/dev/null
source <(bash "$base_script" --env)
podman info >/dev/null 2>&1 || fail "podman does not work after container-base.sh"
ok "podman $(podman --version | awk '{print $3}') ready in $(secs $(($(now_ms) - t))) s"
# The base image the Dockerfile builds on (node:24-slim). The official images have a working npm
# and Node's headers in /usr/local/include/node (the build compiles better-sqlite3 against
# them, as no prebuilt binary can be fetched). An older shared stand-in had its npm folder one
# level too high and no headers: add a layer that fixes that (headers from this machine, only
# when its Node is the image's). A real node image passes this check untouched.
base_image=$(awk '$1 == "FROM" && $NF == "runtime" { sub(/^docker.io\/library\//, "", $2); print $2 }' "$repo/Dockerfile")
[ -n "$base_image" ] || fail "no 'FROM <image> AS runtime' line in the Dockerfile"
if ! podman run --rm --network none "docker.io/library/$base_image" \
  sh -c 'npm --version && test -f /usr/local/include/node/node_version.h' >/dev/null 2>&1; then
  image_node=$(podman run --rm --network none "docker.io/library/$base_image" node --version)
  [ "$image_node" = "$(node --version)" ] || fail "the $base_image stand-in ($image_node) lacks npm or Node's headers, and this machine's Node ($(node --version)) cannot lend its own"
  nodedir=$(node -p 'process.config.variables.node_prefix || "/usr"')
  headers=""
  for d in "$nodedir/include/node" /usr/include/node /usr/local/include/node; do
    if [ -f "$d/node_version.h" ]; then headers=$d; break; fi
  done
  [ -n "$headers" ] || fail "the $base_image stand-in has no Node headers and none were found on this machine"
  ctx="$tmp/node-fix"
  mkdir -p "$ctx/include"
  cp -a "$headers" "$ctx/include/node"
  cat >"$ctx/Containerfile" <<EOF
FROM docker.io/library/$base_image
COPY include/node /usr/local/include/node
RUN if [ ! -e /usr/local/lib/node_modules/npm/bin/npm-cli.js ] && [ -e /usr/local/lib/node_modules/bin/npm-cli.js ]; then \\
      mv /usr/local/lib/node_modules /usr/local/lib/npm && mkdir /usr/local/lib/node_modules \\
      && mv /usr/local/lib/npm /usr/local/lib/node_modules/npm; fi \\
 && npm --version >/dev/null
EOF
  podman build -q -t localhost/node:host-fixed "$ctx" >"$tmp/fix.log" 2>&1 || { cat "$tmp/fix.log" >&2; fail "could not fix the $base_image stand-in"; }
  podman tag localhost/node:host-fixed "docker.io/library/$base_image"
  ok "$base_image stand-in given a working npm and this machine's Node headers from $headers (localhost/node:host-fixed)"
else
  ok "$base_image has npm and Node's headers"
fi

step "build the image (podman build --format docker, keeps HEALTHCHECK)"
t=$(now_ms)
built=1
podman build --format docker -t "$tag" \
  --volume "$AF_CA":/etc/ssl/host-ca.crt:ro --volume "$AF_NPMRC":/usr/local/etc/npmrc:ro \
  "$repo" >"$tmp/build.log" 2>&1 || { tail -n 40 "$tmp/build.log" >&2; fail "podman build failed (last lines above)"; }
ok "built $tag in $(secs $(($(now_ms) - t))) s"
config=$(podman image inspect --format '{{json .Config}}' "$tag")
check "$config" '/^[1-9][0-9]*(:[0-9]+)?$/.test(r.User)' "USER is a non-zero numeric uid ($(jget "$config" r.User))"
health=$(podman image inspect --format '{{json .HealthCheck}}' "$tag")
check "$health" 'r !== null && r.Test.join(" ").includes("/healthz")' "HEALTHCHECK probes /healthz"
check "$config" '"3000/tcp" in r.ExposedPorts' "EXPOSE 3000"
check "$config" '"/data" in r.Volumes' "VOLUME /data"
check "$config" 'r.Env.includes("HOST=0.0.0.0") && r.Env.includes("AGENTFOREST_DATA=/data/agentforest.db")' "HOST=0.0.0.0, AGENTFOREST_DATA=/data/agentforest.db"
size_bytes=$(podman image inspect --format '{{.Size}}' "$tag")
base_bytes=$(podman image inspect --format '{{.Size}}' "docker.io/library/$base_image")
image_size="$((size_bytes / 1000000)) MB ($(((size_bytes - base_bytes) / 1000000)) MB on top of the $((base_bytes / 1000000)) MB $base_image base)"
ok "image size: $image_size"

step "without AGENTFOREST_API_KEYS the container refuses to start"
containers+=("agentforest-test-nokey-$run_id")
set +e
timeout 60 podman run --name "agentforest-test-nokey-$run_id" "$tag" >"$tmp/nokey.out" 2>"$tmp/nokey.err"
rc=$?
set -e
[ "$rc" = 78 ] || fail "expected exit code 78 without a key, got $rc: $(cat "$tmp/nokey.out" "$tmp/nokey.err")"
grep -q 'AGENTFOREST_API_KEYS is empty' "$tmp/nokey.err" || fail "no clear message on stderr without a key: $(cat "$tmp/nokey.err")"
ok "exit 78: $(grep -m1 'AGENTFOREST_API_KEYS is empty' "$tmp/nokey.err" | sed 's/^ *- //' | cut -c1-110)..."

step "SIGTERM right after start (node as PID 1, before the service's own handlers): prompt exit"
early="agentforest-test-early-$run_id"
containers+=("$early")
podman run -d --name "$early" -e AGENTFOREST_API_KEYS="$key" "$tag" >/dev/null 2>"$tmp/early.err" \
  || fail "podman run $early failed: $(grep -v systemd "$tmp/early.err")"
sleep 0.3
t=$(now_ms)
podman kill --signal TERM "$early" >/dev/null || fail "podman kill --signal TERM $early failed"
rc=$(timeout 15 podman wait "$early") || fail "SIGTERM sent 0.3 s after start was ignored: not exited within 15 s (PID 1 without a signal handler?)"
early_ms=$(($(now_ms) - t))
[ "$rc" = 0 ] || fail "$early exited with code $rc after an early SIGTERM (expected 0)"
[ "$early_ms" -lt 5000 ] || fail "$early took $(secs "$early_ms") s to exit after an early SIGTERM (limit 5 s)"
how="after the drain"
if podman logs "$early" 2>&1 | grep -q 'during start-up; exiting before serving'; then how="before serving (start-up handler in server.ts)"; fi
ok "exit 0, $(secs "$early_ms") s after SIGTERM, $how"

step "run the image with a data volume, node as PID 1 (no --init); wait for health"
podman volume create "$volume" >/dev/null || fail "podman volume create failed"
volume_made=1
first="agentforest-test-a-$run_id"
start "$first" "$(now_ms)"
healthy_first=$healthy_ms
ok "healthy $(secs "$healthy_first") s after podman run (polled with podman healthcheck run); serving on $base"
http GET /readyz; expect 200 "GET /readyz"
ok "GET /readyz 200"
code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "$base/v1/agents") || fail "GET /v1/agents: no answer"
[ "$code" = 401 ] || fail "GET /v1/agents without the operator key: expected 401, got $code"
ok "GET /v1/agents without the key is 401"

step "the process runs as a non-root user"
[ "$(program "$first" 1)" = node ] || fail "PID 1 is $(program "$first" 1), expected node (no --init)"
uid=$(podman exec "$first" awk '/^Uid:/{print $2}' /proc/1/status)
[ -n "$uid" ] && [ "$uid" != 0 ] || fail "PID 1 (node) runs as uid '$uid'"
ok "PID 1 is node, uid $uid"

step "smoke over HTTP: root, continuable child, quiet report, session read"
root=ctr-root
http POST /v1/agents '{"id":"ctr-root","instructions":"You coordinate."}'; expect 201 "create the root"
root_token=$(jget "$body" r.agentToken)
check "$body" 'r.agent.kind === "root" && r.agent.id === "ctr-root"' "root created"
http POST "/v1/agents/$root/messages" '{"content":"Find the answer, with a helper.","delivery":"followup"}'; expect 202 "followup to the root"
http POST "/v1/agents/$root/steps/next" '{"waitMs":5000}' "$root_token"; expect 200 "claim the root's first step"
check "$body" 'r.step.index === 0 && r.step.tools.some((t) => t.function.name === "spawn_subagent")' "root step 0 offers spawn_subagent"
step0=$(jget "$body" r.step.id)
http POST "/v1/agents/$root/steps/$step0/output" \
  '{"toolCalls":[{"id":"call-spawn","name":"spawn_subagent","input":{"prompt":"Find the answer.","label":"finder"}}]}' "$root_token"
expect 200 "the root's spawn_subagent output"
check "$body" 'r.turn === "open" && r.spawned.length === 1 && r.toolResults[0].isError === false' "spawn_subagent started a continuable child"
child=$(jget "$body" r.spawned[0].agentId)
child_token=$(jget "$body" r.spawned[0].agentToken)
http GET "/v1/agents/$child"; expect 200 "GET the child"
check "$body" "r.kind === 'child' && r.mode === 'continuable' && r.parentId === '$root'" "child $child is continuable, parent $root"
http POST "/v1/agents/$child/tool-calls" '{"name":"report","input":{"output":"The answer is 42."},"toolCallId":"call-report"}' "$child_token"
expect 200 "the child's report tool call"
check "$body" 'r.isError === false && r.content.startsWith("report accepted by the agent that started you as message ")' "report accepted"
report_id=$(jget "$body" r.output.messageId)
http POST "/v1/agents/$child/steps/next" '{"waitMs":5000}' "$child_token"; expect 200 "claim the child's step"
child_step=$(jget "$body" r.step.id)
http POST "/v1/agents/$child/steps/$child_step/output" '{"content":"Reported."}' "$child_token"; expect 200 "the child's final output"
check "$body" 'r.turn === "ended"' "child turn ended"
http POST "/v1/agents/$root/steps/next" '{"waitMs":5000}' "$root_token"; expect 200 "claim the root's second step"
check "$body" 'r.step.index === 1 && r.step.messages.some((m) => m.role === "user" && String(m.content).includes("The answer is 42."))' \
  "the quiet report reached the root's next step"
step1=$(jget "$body" r.step.id)
http POST "/v1/agents/$root/steps/$step1/output" '{"content":"The helper says 42."}' "$root_token"; expect 200 "the root's final output"
check "$body" 'r.turn === "ended"' "root turn ended"
deadline=$(($(now_ms) + 10000))
while :; do
  http GET "/v1/agents/$child"; expect 200 "GET the child"
  [ "$(jget "$body" r.status)" = settled ] && break
  [ "$(now_ms)" -lt "$deadline" ] || fail "the child did not settle within 10 s (status $(jget "$body" r.status))"
  sleep 0.1
done
ok "child settled"
http GET "/v1/agents/$root/session?after=0&limit=1000"; expect 200 "read the root's session"
session_before=$(jget "$body" r.entries)
check "$body" "r.entries.some((e) => e.type === 'message' && e.messageId === '$report_id' && e.source.kind === 'subagent-report' && e.source.senderSessionId === '$child' && e.content[0].text === 'Background subagent $child reported:' && e.content[1].text === 'The answer is 42.')" \
  "root session holds the report from $child"
check "$body" 'r.entries.filter((e) => e.type === "turn-end").map((e) => e.reason).join() === "completed" && r.entries.every((e, i) => e.seq === i + 1)' \
  "root session: one completed turn, gap-free seq ($(jget "$body" r.entries.length) entries)"
http GET "/v1/agents/$child/session?after=0&limit=1000"; expect 200 "read the child's session"
child_session_before=$(jget "$body" r.entries)

step "the forest view is served from the image"
for path in /ui "/ui/forests/$root" /ui/assets/app.js /ui/assets/styles.css; do
  ui_code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "$base$path") || fail "GET $path: no HTTP answer"
  [ "$ui_code" = 200 ] || fail "GET $path (no key): expected HTTP 200, got $ui_code"
done
ok "/ui, /ui/forests/$root and its assets served without a key"

step "SIGTERM (no --init): an open long-poll ends, the drain is logged, prompt exit 0"
curl -sS -o /dev/null -w '%{http_code}' --max-time 30 -X POST "$base/v1/agents/$root/steps/next" \
  -H "authorization: Bearer $key" -H "x-agent-token: $root_token" -H 'content-type: application/json' \
  -d '{"waitMs":25000}' >"$tmp/longpoll.code" 2>/dev/null &
longpoll=$!
sleep 0.5
stop_with_sigterm "$first"
stop_first=$stop_ms
wait "$longpoll" || true
[ "$(cat "$tmp/longpoll.code")" = 204 ] || fail "the long-poll open at SIGTERM answered '$(cat "$tmp/longpoll.code")', expected 204"
ok "the long-poll open at SIGTERM answered 204"

step "a new container (with --init) on the same volume: the root resumes with its whole session"
second="agentforest-test-b-$run_id"
start "$second" "$(now_ms)" --init
healthy_second=$healthy_ms
ok "healthy $(secs "$healthy_second") s after podman run --init; serving on $base"
pid1=$(program "$second" 1)
[ "$pid1" != node ] || fail "with --init, PID 1 should be the init process, not node"
uid2=$(node_uid "$second")
[ -n "$uid2" ] && [ "$uid2" != 0 ] || fail "node runs as uid '$uid2' under --init"
ok "PID 1 is $pid1, node runs as uid $uid2"
http GET "/v1/agents/$root"; expect 404 "the root is not live after a restart until resumed"
ok "GET root is 404 before resume"
http GET "/v1/agents/$root/session?after=0&limit=1000"; expect 200 "read the root's session after restart"
[ "$(jget "$body" r.entries)" = "$session_before" ] || fail "the root's session changed across the restart"
ok "root session identical after restart"
http GET "/v1/agents/$child/session?after=0&limit=1000"; expect 200 "read the child's session after restart"
[ "$(jget "$body" r.entries)" = "$child_session_before" ] || fail "the child's session changed across the restart"
ok "child session identical after restart"
http POST "/v1/agents/$root/resume"; expect 201 "resume the root"
new_token=$(jget "$body" r.agentToken)
[ "$new_token" != "$root_token" ] || fail "resume returned the old token"
ok "root resumed with a new token"
http GET "/v1/agents/$root"; expect 200 "GET the resumed root"
check "$body" 'r.status === "idle"' "resumed root is live and idle"
http POST "/v1/agents/$root/steps/next" '{"waitMs":0}' "$root_token"; expect 403 "the old token after resume"
ok "the old token is refused (403)"
http POST "/v1/agents/$root/messages" '{"content":"What did the helper say?","delivery":"followup"}'; expect 202 "followup to the resumed root"
http POST "/v1/agents/$root/steps/next" '{"waitMs":5000}' "$new_token"; expect 200 "claim the resumed root's step"
check "$body" '((m) => m[0].content === "You coordinate." && m.some((x) => x.role === "assistant" && x.tool_calls && x.tool_calls.length === 1) && m.some((x) => String(x.content).includes("The answer is 42.")) && m.some((x) => x.content === "The helper says 42.") && m[m.length - 1].content === "What did the helper say?")(r.step.messages)' \
  "the resumed root's next step carries its whole history (spawn, report, answer)"
step2=$(jget "$body" r.step.id)
http POST "/v1/agents/$root/steps/$step2/output" '{"content":"It said 42."}' "$new_token"; expect 200 "the resumed root's output"
http GET "/v1/agents/$root/session?after=0&limit=1000"; expect 200 "read the root's session"
check "$body" "JSON.stringify(r.entries.slice(0, $(jget "$session_before" r.length))) === JSON.stringify($session_before) && r.entries.every((e, i) => e.seq === i + 1) && r.entries[r.entries.length - 1].type === 'turn-end'" \
  "the session continues after the old entries, gap-free"

step "SIGTERM through --init: drain logged, prompt exit 0"
stop_with_sigterm "$second"
stop_second=$stop_ms

printf '\n==> PASS in %ss\n' "$(secs $(($(now_ms) - started)))"
printf '    image size:               %s\n' "$image_size"
printf '    start-to-healthy:         %ss (node as PID 1), %ss (--init)\n' "$(secs "$healthy_first")" "$(secs "$healthy_second")"
printf '    uid of the node process:  %s\n' "$uid"
printf '    SIGTERM to exit:          %ss (node as PID 1), %ss (--init)\n' "$(secs "$stop_first")" "$(secs "$stop_second")"
printf '    SIGTERM 0.3 s after start: exit 0 in %ss (node as PID 1)\n' "$(secs "$early_ms")"
