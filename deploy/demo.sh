#!/usr/bin/env bash
# The problem and the fix on a real mixed-version control plane:
# node-a runs kube-apiserver v1.35.4, node-b v1.36.3, and skewgate runs on
# both, steering each node's IP:6443 into itself. Run as root (make demo).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${SKEWGATE_LAB_DIR:-.lab}
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl; }

bin/skewlab down --dir "$dir" >/dev/null 2>&1 || true
trap 'echo; echo "== tearing the lab down"; rm -f "${body:-}"; bin/skewlab down --dir "$dir"' EXIT
bin/skewlab up --dir "$dir" --skewgate bin/skewgate
# shellcheck disable=SC1091
. "$dir/env"

body=$(mktemp)
workloads=/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads
say() { printf '\n== %s\n' "$*"; }
show() { # show URL: status line, route headers and the first line of the reason
	curl -sS -D - -o "$body" --cacert "$LAB_CA_FILE" --cert "$LAB_ADMIN_CERT" --key "$LAB_ADMIN_KEY" "$1" |
		grep -iE '^(HTTP|x-skewgate)' | tr -d '\r' | sed 's/^/   /'
	{ grep -m1 -oE '"message": *"[^"]*"' "$body" || grep -m1 -oE '"kind": *"[^"]*"' "$body"; } | sed 's/^/   /' || true
}
steer() { bin/skewgate steer "$1" --pin-path "$LAB_NODE_A_PIN_PATH" | head -1 | sed 's/^/   /'; }

say "node-b (v1.36.3) serves scheduling.k8s.io/v1alpha2 workloads:"
show "$LAB_NODE_B_URL$workloads"

say "skewgate OFF on node-a (kill switch): node-a's own kube-apiserver v1.35.4 answers — the false 404:"
steer off
show "$LAB_NODE_A_URL$workloads"

say "skewgate ON on node-a: the same URL, answered by node-b through skewgate:"
steer on
sleep 0.3
show "$LAB_NODE_A_URL$workloads"

say "what skewgate decided, and why (skewgate explain):"
bin/skewgate explain list "$workloads" --admin "$LAB_NODE_A_ADMIN_URL" | sed 's/^/   /'

say "rollback: steer off again — new connections reach the apiserver directly:"
steer off
show "$LAB_NODE_A_URL$workloads"
steer on
