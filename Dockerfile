# rlgate: the gateway, the engine simulators and the trainer simulator in one image.
#   docker build -t rlgate .
#   docker run --rm -p 30000:30000 rlgate gateway --host 0.0.0.0        # embedded nats-server
# TypeScript runs through tsx at run time (a production dependency), so there is no build step.
FROM node:20-bookworm-slim

# nats-server: the embedded server of a single-node gateway (without --nats-url).
# util-linux (setpriv) ties that server's life to the gateway's; it is in the base image.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nats-server \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY package.json package-lock.json ./
# Production dependencies only; zeromq and msgpackr ship prebuilt binaries for Node 20.
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

COPY bin ./bin
COPY src ./src
COPY actors ./actors
COPY proto ./proto

ENV NODE_ENV=production
USER node
EXPOSE 30000
ENTRYPOINT ["node", "bin/rlgate.mjs"]
CMD ["gateway", "--host", "0.0.0.0"]
