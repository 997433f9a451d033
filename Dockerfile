# rlgate: the gateway, the engine simulators and the trainer simulator in one image.
#   docker build -t rlgate .
#   docker run --rm -p 30000:30000 rlgate gateway --host 0.0.0.0        # embedded nats-server
# The image runs the compiled JavaScript (dist/, built in the first stage) with the production
# dependencies only: no TypeScript sources, compiler or tsx at run time.

# ---- build: dist/ from src/, sim/ and actors/ (tsc, a development dependency) ----
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` would build before the sources are here (they come next, so this
# layer is reused while the lockfile is unchanged); tsc needs no install script.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY sim ./sim
COPY actors ./actors
COPY proto ./proto
COPY ui ./ui
COPY scripts/bundle.mjs ./scripts/
RUN npm run build && rm -f dist/.tsbuildinfo

# ---- run ----
FROM node:20-bookworm-slim

# nats-server: the embedded server of a single-node gateway (without --nats-url).
# util-linux (setpriv) ties that server's life to the gateway's; it is in the base image.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nats-server \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY package.json package-lock.json ./
# Production dependencies only. --ignore-scripts skips our own `prepare` (the build is the first
# stage's); zeromq and msgpackr ship prebuilt binaries for Node 20, so their install scripts have
# nothing to do.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

COPY bin ./bin
# dist/proto/ holds the .proto files the gateway and the simulators load at run time.
COPY --from=build /app/dist ./dist

ENV NODE_ENV=production
USER node
EXPOSE 30000
ENTRYPOINT ["node", "bin/rlgate.mjs"]
CMD ["gateway", "--host", "0.0.0.0"]
