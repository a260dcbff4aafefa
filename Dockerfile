# agentforest container image. Build: docker build -t agentforest .   (or: podman build --format docker ...)
# Run:   docker run -d -p 3000:3000 -v agentforest-data:/data -e AGENTFOREST_API_KEYS=<key> agentforest
# `npm run test:container` builds this file, runs it and checks it end to end (see docs/guides/deploying.md, "Checking the image").

# ---- build: compile the native module (better-sqlite3) and TypeScript, then keep only
# production dependencies.
FROM node:24-slim AS build
# node-gyp needs python3, make and a C++ compiler whenever no prebuilt better-sqlite3 binary
# can be fetched (always, on a machine that reaches only the npm registry).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
# Build against the headers of the Node.js in this image (node images ship them in
# /usr/local/include/node) instead of downloading headers from nodejs.org.
ENV npm_config_nodedir=/usr/local
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
# The build's second half copies the forest view's static files (src/ui) to dist/ui.
COPY scripts/copy-ui.ts ./scripts/
# Once the addon is linked, only build/Release/better_sqlite3.node of better-sqlite3's build
# is needed: its SQLite sources and object files (~25 MB) are dead weight.
RUN npm run build \
 && npm prune --omit=dev --no-audit --no-fund \
 && cd node_modules/better-sqlite3 \
 && mv build/Release/better_sqlite3.node /tmp/ \
 && rm -rf build deps src \
 && mkdir -p build/Release \
 && mv /tmp/better_sqlite3.node build/Release/

# ---- runtime: dist/, production node_modules, openapi.yaml (and package.json, whose
# "type": "module" makes Node load dist/*.js as ES modules). Code is owned by root and
# read-only for the service user; only /data is writable.
FROM node:24-slim AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    AGENTFOREST_DATA=/data/agentforest.db
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json openapi.yaml ./
# uid/gid 1000 is the `node` user of the node images. A numeric USER lets orchestrators
# (Kubernetes runAsNonRoot) verify that the process is not root.
RUN mkdir -p /data && chown 1000:1000 /data
USER 1000:1000
VOLUME ["/data"]
EXPOSE 3000
# /healthz is liveness (no key needed); /readyz turns 503 while draining.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||3000)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# Node runs as PID 1 (exec form, no shell in between). PID 1 ignores every signal it has no
# handler for, so dist/server.js handles SIGTERM/SIGINT first thing, before it loads the rest:
# during start-up a signal ends the process at once, afterwards it drains and exits 0. Works
# the same under `--init` (tini/catatonit forward the signal). Give the stop timeout at least
# AGENTFOREST_DRAIN_TIMEOUT_MS + 5 s.
STOPSIGNAL SIGTERM
# The same command as `npm start`, young-generation size included (see docs/performance.md).
CMD ["node", "--max-semi-space-size=32", "dist/server.js"]
