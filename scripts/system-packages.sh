# The Debian packages rlgate needs beyond Node: one list, sourced by scripts/ensure-deps.sh (which
# `npm test`, `npm run demo` and `npm run bench` run, installing what is missing) and by .ci/run
# (which installs them all on a fresh machine). Add a package here and nowhere else.

# the bus: the gateway embeds or connects to nats-server
NATS_PKGS=(nats-server)
# the cross-language wire test: Python peers generated from proto/ with Debian's protoc
PY_PKGS=(python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc libprotobuf-dev)
# the web page's and the API document's browser tests drive Debian's chromium (playwright-core)
BROWSER_PKGS=(chromium)
# the partition fixtures cut gateway replicas off in network namespaces
NETNS_PKGS=(iproute2 iptables)
# docker-compose 1.29 validates docker-compose.yml with no engine; its recommends would pull the engine in
COMPOSE_PKGS_NO_RECOMMENDS=(docker-compose)
# `npm run bench` only: the data-plane benchmark's yardsticks
BENCH_PKGS_NO_RECOMMENDS=(nginx wrk)

# What the test suite needs (`.ci/run` installs these).
APT_PACKAGES=("${NATS_PKGS[@]}" "${PY_PKGS[@]}" "${BROWSER_PKGS[@]}" "${NETNS_PKGS[@]}")
APT_PACKAGES_NO_RECOMMENDS=("${COMPOSE_PKGS_NO_RECOMMENDS[@]}")
