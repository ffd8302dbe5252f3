#!/usr/bin/env bash
# Bring up pcs-ray on a multi-node GPU cluster (CloudLab or any hosts reachable by ssh).
#
#   cloudlab/bringup.sh HEAD [WORKER ...]
#
# On every host: install pcs-ray into a virtualenv (if missing), then start Ray
# with the per-GPU resources `pcs-ray node-resources` prints for that host
# (from NVML: one `<node>_gpu<i>` resource per GPU). Finally start the
# coordinator on the head. Environment:
#   REPO_URL     git URL of pcs-ray to clone on hosts without it (default: this checkout's origin)
#   REMOTE_DIR   where pcs-ray lives on the hosts (default: ~/pcs-ray)
#   STATE_DIR    coordinator journal + checkpoints; must be shared by all hosts (default: /proj/pcs-ray/state)
#   POLICY       scheduling policy for `pcs-ray start` (default: pcs-bal)
#   RAY_PORT     GCS port on the head (default: 6379)
#   DRY_RUN=1    print the commands instead of running them
set -euo pipefail

if [[ $# -lt 1 ]]; then
    sed -n '2,17p' "$0" >&2
    exit 2
fi

HEAD=$1
REMOTE_DIR=${REMOTE_DIR:-'~/pcs-ray'}
STATE_DIR=${STATE_DIR:-/proj/pcs-ray/state}
POLICY=${POLICY:-pcs-bal}
RAY_PORT=${RAY_PORT:-6379}
REPO_URL=${REPO_URL:-$(git -C "$(dirname "$0")/.." remote get-url origin 2>/dev/null || echo "")}

run_on() {  # run_on HOST COMMAND
    if [[ -n ${DRY_RUN:-} ]]; then
        printf 'ssh %s %q\n' "$1" "$2"
    else
        ssh -o BatchMode=yes "$1" "$2"
    fi
}

install_cmd="set -e
if [ ! -d $REMOTE_DIR ]; then git clone ${REPO_URL:?set REPO_URL} $REMOTE_DIR; fi
cd $REMOTE_DIR
if [ ! -x .venv/bin/pcs-ray ]; then python3 -m venv .venv && .venv/bin/pip install -q -e .; fi"

head_ip=$(if [[ -n ${DRY_RUN:-} ]]; then echo HEAD_IP; else ssh -o BatchMode=yes "$HEAD" 'hostname -I | cut -d" " -f1'; fi)

for host in "$@"; do
    run_on "$host" "$install_cmd"
done

# Head first: its GPUs become <head>_gpu0.. resources. Token authentication is on
# (RAY_AUTH_MODE=token); the head's token (~/.ray/auth_token, generated if missing)
# is copied to every worker, which needs it to join.
run_on "$HEAD" "mkdir -p ~/.ray && chmod 700 ~/.ray && (test -s ~/.ray/auth_token || $REMOTE_DIR/.venv/bin/ray get-auth-token --generate >/dev/null)"
run_on "$HEAD" "cd $REMOTE_DIR && export RAY_AUTH_MODE=token && eval .venv/bin/ray start --port=$RAY_PORT \$(.venv/bin/pcs-ray node-resources --head)"
shift
for host in "$@"; do
    if [[ -n ${DRY_RUN:-} ]]; then
        printf 'ssh %s cat ~/.ray/auth_token | ssh %s %q\n' "$HEAD" "$host" 'umask 077; mkdir -p ~/.ray; cat > ~/.ray/auth_token'
    else
        ssh -o BatchMode=yes "$HEAD" 'cat ~/.ray/auth_token' | ssh -o BatchMode=yes "$host" 'umask 077; mkdir -p ~/.ray; cat > ~/.ray/auth_token'
    fi
    run_on "$host" "cd $REMOTE_DIR && export RAY_AUTH_MODE=token && eval .venv/bin/ray start \$(.venv/bin/pcs-ray node-resources --address=$head_ip:$RAY_PORT)"
done

run_on "$HEAD" "mkdir -p $STATE_DIR && cd $REMOTE_DIR && .venv/bin/pcs-ray start --address=$head_ip:$RAY_PORT --policy=$POLICY --state-dir=$STATE_DIR"
echo "pcs-ray is up: ssh $HEAD, then: cd $REMOTE_DIR && .venv/bin/pcs-ray status --address=$head_ip:$RAY_PORT"
