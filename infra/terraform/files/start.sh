#!/bin/sh
# The entry point of every Parley container: mesh-env.mjs names this process on the TCP mesh after
# its pod's address and lists the peers DNS knows (why, in that file), then the server replaces
# this shell ("$@" is the Deployment's args), so SIGTERM reaches the server itself and it drains.
set -eu
mesh=$(node "$(dirname "$0")/mesh-env.mjs")
NODE_ID=${mesh%% *}
TRANSPORTER=${mesh#* }
export NODE_ID TRANSPORTER
exec "$@"
