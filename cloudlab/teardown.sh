#!/usr/bin/env bash
# Stop pcs-ray and Ray on the hosts brought up by bringup.sh (run from your workstation).
#
#   cloudlab/teardown.sh HEAD [WORKER ...]
#
# The coordinator checkpoints every running job first (`pcs-ray stop`), so a
# later bringup.sh with the same STATE_DIR resumes them. Then Ray is stopped
# on each remote host. DRY_RUN=1 prints the commands.
set -euo pipefail
if [[ $# -lt 1 ]]; then
    sed -n '2,9p' "$0" >&2
    exit 2
fi
REMOTE_DIR=${REMOTE_DIR:-'~/pcs-ray'}
RAY_PORT=${RAY_PORT:-6379}
run_on() {
    if [[ -n ${DRY_RUN:-} ]]; then printf 'ssh %s %q\n' "$1" "$2"; else ssh -o BatchMode=yes "$1" "$2"; fi
}
run_on "$1" "cd $REMOTE_DIR && .venv/bin/pcs-ray stop --address=127.0.0.1:$RAY_PORT || true"
for host in "$@"; do
    run_on "$host" "cd $REMOTE_DIR && .venv/bin/ray stop"
done
