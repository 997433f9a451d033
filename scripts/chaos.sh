#!/usr/bin/env bash
# `npm run chaos [-- <test/chaos file>...]`: every chaos scenario (or the ones named) at full size,
# one file at a time so that no scenario's load bends another's figures, each writing its figures
# to chaos/results/ (RLGATE_CHAOS_RESULTS to write elsewhere). docs/reliability.md quotes them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/ensure-deps.sh
npm run --silent build
# 3,000 slow clients hold about 3,100 descriptors in the test process and as many in the gateway:
# raise the soft limit where the hard one allows (the slow-clients scenario says so if it is short).
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
export RLGATE_CHAOS=full RLGATE_CHAOS_RESULTS="${RLGATE_CHAOS_RESULTS:-chaos/results}"
files=("$@")
[[ ${#files[@]} -eq 0 ]] && files=(test/chaos)
exec npx vitest run "${files[@]}" --no-file-parallelism --testTimeout 7200000 --hookTimeout 600000
