#!/usr/bin/env bash
# The test command: every *.test.ts file under the repository, through the real server.
set -u
cd "$(dirname "$0")/.."
exec node --import tsx scripts/run-tests.ts "$@"
