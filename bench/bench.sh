#!/usr/bin/env bash
# `npm run bench [-- flags]`: with --help (or -h) it prints the flags and does nothing else (no
# install, no process started); otherwise it makes sure the dependencies are there
# (scripts/ensure-deps.sh bench), then runs bench/run.ts through tsx with the flags.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for arg in "$@"; do
  case "$arg" in
    --help | -h) exec cat bench/help.txt ;;
  esac
done
bash scripts/ensure-deps.sh bench
exec node --import tsx bench/run.ts "$@"
