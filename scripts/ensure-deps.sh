#!/usr/bin/env bash
# Makes sure what `npm test`, `npm run demo` and `npm run bench` need is present: node_modules
# matching package-lock.json, the nats-server binary (Debian package `nats-server`), the Python
# packages of the cross-language test, docker-compose (the compose file's validation), chromium
# (the browser tests) and iproute2 + iptables (the partition scenario).
# `ensure-deps.sh bench` also wants the data-plane benchmark's yardsticks, nginx and wrk.
# Quiet when everything is there; installs only what is missing; never edits package files.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The package names: one list, shared with .ci/run.
source scripts/system-packages.sh

# npm writes node_modules/.package-lock.json on every install: older than the lockfile means stale.
if [[ ! -d node_modules || ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  echo "ensure-deps: node_modules missing or older than package-lock.json; running npm ci" >&2
  npm ci --no-audit --no-fund >&2
fi

# Same search as src/bus/server.ts findNatsServer(): RLGATE_NATS_SERVER is authoritative when set.
find_nats_server() {
  if [[ -n "${RLGATE_NATS_SERVER:-}" ]]; then
    [[ -x "$RLGATE_NATS_SERVER" ]] && echo "$RLGATE_NATS_SERVER"
    return 0
  fi
  local found
  found="$(command -v nats-server 2>/dev/null || true)"
  if [[ -n "$found" ]]; then echo "$found"; return 0; fi
  local dir
  for dir in /usr/sbin /usr/local/sbin /usr/local/bin; do
    if [[ -x "$dir/nats-server" ]]; then echo "$dir/nats-server"; return 0; fi
  done
}

if [[ -z "$(find_nats_server)" ]]; then
  if [[ -n "${RLGATE_NATS_SERVER:-}" ]]; then
    echo "ensure-deps: RLGATE_NATS_SERVER=$RLGATE_NATS_SERVER is not an executable nats-server." >&2
    echo "ensure-deps: unset it, or install the Debian package: apt-get install nats-server" >&2
    exit 1
  fi
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: nats-server not found; installing the Debian package nats-server" >&2
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${NATS_PKGS[@]}" >&2
  fi
  if [[ -z "$(find_nats_server)" ]]; then
    echo "ensure-deps: nats-server not found (searched PATH, /usr/sbin, /usr/local/sbin, /usr/local/bin)." >&2
    echo "ensure-deps: install the Debian package as root: apt-get install nats-server" >&2
    echo "ensure-deps: (or set RLGATE_NATS_SERVER to the path of a nats-server binary)" >&2
    exit 1
  fi
fi

# The cross-language wire test generates Python stubs from proto/ with Debian's protoc and runs them
# with Debian's interpreter (python3-grpcio). Installed when missing and allowed, like nats-server.
py_ready() {
  command -v protoc >/dev/null 2>&1 && [[ -x /usr/bin/grpc_python_plugin ]] && [[ -f /usr/include/google/protobuf/struct.proto ]] \
    && /usr/bin/python3 -c 'import grpc, google.protobuf' >/dev/null 2>&1
}
if ! py_ready; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: installing the Debian packages of the cross-language test: ${PY_PKGS[*]}" >&2
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${PY_PKGS[@]}" >&2
  fi
  if ! py_ready; then
    echo "ensure-deps: the cross-language test needs Debian packages: apt-get install ${PY_PKGS[*]}" >&2
    exit 1
  fi
fi

# The deployment test validates docker-compose.yml with Debian's docker-compose 1.29, which needs no
# docker engine; --no-install-recommends keeps the engine from being pulled in.
if ! command -v docker-compose >/dev/null 2>&1; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: installing docker-compose (validates docker-compose.yml; no engine needed)" >&2
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${COMPOSE_PKGS_NO_RECOMMENDS[@]}" >&2
  fi
  # Only one test file needs it, so the demo still runs without: that test says what is missing.
  command -v docker-compose >/dev/null 2>&1 \
    || echo "ensure-deps: the deployment test needs docker-compose: apt-get install --no-install-recommends docker-compose" >&2
fi

# The partition fixtures (test/fixtures/netns.ts) run gateway replicas in network namespaces and
# cut them off with `ip` (iproute2) and iptables. Installed when missing and allowed, like nats-server.
if ! command -v ip >/dev/null 2>&1 || ! command -v iptables >/dev/null 2>&1; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: installing the partition scenario's network tools: iproute2 iptables" >&2
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${NETNS_PKGS[@]}" >&2
  fi
  # Only the partition scenario needs them (as root); it says what is missing.
  { command -v ip >/dev/null 2>&1 && command -v iptables >/dev/null 2>&1; } \
    || echo "ensure-deps: the partition scenario needs iproute2 and iptables: apt-get install iproute2 iptables" >&2
fi

# The web page's browser test and the API document's test drive Debian's chromium through
# playwright-core (no browser download). Installed when missing and allowed, like nats-server.
if [[ ! -x /usr/lib/chromium/chromium ]] && ! command -v chromium >/dev/null 2>&1; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: installing chromium for the browser tests" >&2
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${BROWSER_PKGS[@]}" >&2
  fi
  { [[ -x /usr/lib/chromium/chromium ]] || command -v chromium >/dev/null 2>&1; } \
    || echo "ensure-deps: the browser tests need Debian's chromium (they fail without it): apt-get install chromium" >&2
fi

# The data-plane benchmark compares the gateway with nginx `proxy_pass` and loads it with wrk.
# Only `npm run bench` asks; without them the benchmark reports the gap instead of failing.
if [[ "${1:-}" == bench ]] && { ! command -v nginx >/dev/null 2>&1 && [[ ! -x /usr/sbin/nginx ]] || ! command -v wrk >/dev/null 2>&1; }; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: installing the data-plane benchmark's yardsticks: nginx wrk" >&2
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${BENCH_PKGS_NO_RECOMMENDS[@]}" >&2 || echo "ensure-deps: could not install nginx/wrk; the benchmark will say what it skipped" >&2
  else
    echo "ensure-deps: nginx and/or wrk missing (apt-get install nginx wrk); the benchmark will say what it skipped" >&2
  fi
fi
