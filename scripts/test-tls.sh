#!/usr/bin/env bash
# Makes a throwaway certificate authority and a localhost server certificate signed by it, for the
# tests' HTTPS webhook receivers. Node reads NODE_EXTRA_CA_CERTS only at process start, so the test
# command creates them before it starts node. Prints the directory holding ca.pem, key.pem, cert.pem.
set -eu
dir="$(mktemp -d "${TMPDIR:-/tmp}/parley-test-tls-XXXXXX")"
cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 2 \
  -subj "/CN=Parley test CA" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout key.pem -out server.csr -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > ext.cnf
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out cert.pem -days 2 -extfile ext.cnf 2>/dev/null
echo "$dir"
