#!/usr/bin/env bash
# The test command: every *.test.ts file under the repository, through the real server.
# HTTPS webhook receivers in the tests present a certificate from a throwaway CA that the server
# trusts through NODE_EXTRA_CA_CERTS, exactly as an operator would add a private CA.
set -u
cd "$(dirname "$0")/.."
tls_dir="$(bash scripts/test-tls.sh)" || { echo "could not create the test certificates"; echo "0 passed, 1 failed"; exit 1; }
trap 'rm -rf "$tls_dir"' EXIT
export PARLEY_TEST_TLS_DIR="$tls_dir"
export NODE_EXTRA_CA_CERTS="$tls_dir/ca.pem"
node --import tsx scripts/run-tests.ts "$@"
