#!/usr/bin/env bash
# The test command: every *.test.ts file under the repository, through the real server, on the
# embedded SQLite store and local disk; then the black-box tests (test/*.test.ts) again with every
# test server built as the local cluster is (PARLEY_TEST_TOPOLOGY=cluster: 2 api, 2 engine, 2
# gateway and 1 webhooks node on the TCP mesh behind nginx, presence in Redis, the webhook fleet on
# Kafka) on a real Cassandra (PARLEY_TEST_STORE=cassandra) and a real S3 server
# (PARLEY_TEST_BLOBS=s3), all started by the tests and stopped at the end. The last line is the sum
# of the three passes; the third runs test/cluster/ against `npm run cluster` (the same shape as
# separate processes, on Cassandra, Kafka, Redis and MinIO), which the tests start and stop, and
# kills its processes. With file arguments, only those files run, once, on the topology and
# backends that PARLEY_TEST_TOPOLOGY, PARLEY_TEST_STORE and PARLEY_TEST_BLOBS name.
# HTTPS webhook receivers in the tests present a certificate from a throwaway CA that the server
# trusts through NODE_EXTRA_CA_CERTS, exactly as an operator would add a private CA.
set -u
cd "$(dirname "$0")/.."
tls_dir="$(bash scripts/test-tls.sh)" || { echo "could not create the test certificates"; echo "0 passed, 1 failed"; exit 1; }
summary_dir="$(mktemp -d)"
trap 'rm -rf "$tls_dir" "$summary_dir"' EXIT
export PARLEY_TEST_TLS_DIR="$tls_dir"
export NODE_EXTRA_CA_CERTS="$tls_dir/ca.pem"
# Servers the tests start as processes (npm start) take any free gRPC port, never the default
# 8081, which another server on this machine may hold; the local cluster's test names its own.
export GRPC_PORT=0
if [ "$#" -gt 0 ]; then
  exec node --import tsx scripts/run-tests.ts "$@"
fi

# Runs one pass and keeps its summary line.
pass() {
  local name="$1"
  shift
  "$@" | tee "$summary_dir/$name"
  return "${PIPESTATUS[0]}"
}
pass sqlite node --import tsx scripts/run-tests.ts
sqlite_status=$?
pass cluster-shape env PARLEY_TEST_TOPOLOGY=cluster PARLEY_TEST_STORE=cassandra PARLEY_TEST_BLOBS=s3 node --import tsx scripts/run-tests.ts test/*.test.ts
cluster_shape_status=$?
pass cluster node --import tsx scripts/run-tests.ts test/cluster/*.test.ts
cluster_status=$?

passed=0
failed=0
for name in sqlite cluster-shape cluster; do
  line="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$summary_dir/$name" | tail -1)"
  if [ -z "$line" ]; then
    echo "the $name pass ended without its summary line"
    failed=$((failed + 1))
    continue
  fi
  echo "$name pass: $line"
  grep -E '^FAILED ' "$summary_dir/$name" | sed "s/^/  $name pass: /"
  passed=$((passed + ${line%% passed*}))
  rest="${line#*, }"
  failed=$((failed + ${rest%% failed}))
done
echo "$passed passed, $failed failed"
[ "$sqlite_status" -eq 0 ] && [ "$cluster_shape_status" -eq 0 ] && [ "$cluster_status" -eq 0 ] && [ "$failed" -eq 0 ]
