#!/usr/bin/env bash
# Connect one worker to the manager:
#   1. mint a token for the worker's multikueue-dispatcher ServiceAccount (from `kubectl apply -k config/worker`),
#   2. write a kubeconfig with it (inline CA, no file paths: what Kueue and this controller accept) into the manager
#      Secret <name>-kubeconfig, key `kubeconfig`, in the dispatcher's namespace,
#   3. apply the MultiKueueCluster <name> that names that Secret.
# Two ways to keep the worker reachable:
#   - a long-lived token (the default, --duration 8760h): run this again to rotate it before it lapses; the
#     dispatcher picks the new Secret up without a restart;
#   - a short token renewed by the dispatcher (--renew, e.g. --duration 24h): the MultiKueueCluster is annotated
#     multikueue.x-k8s.io/renew-token: "true", and the dispatcher asks the worker for a new token (the Role
#     multikueue-dispatcher-token of config/worker/rbac.yaml) and writes it into the Secret before the old one
#     lapses. The manager must be allowed to patch that Secret: add its name to config/manager/token-renewal.yaml
#     (or the chart's tokenRenewal.secrets).
#
#   config/worker/connect-worker.sh worker1 --worker-context worker1 --manager-context manager \
#       [--server https://worker1.example:6443] [--namespace multikueue-system] [--duration 8760h] [--renew]
#
# --server: the worker's API URL as the dispatcher reaches it (default: the worker context's own server).
# KUBECTL picks the kubectl program (default: kubectl); KUBECONFIG is honoured.
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
name=$1; shift
worker_context="" manager_context="" server="" namespace=multikueue-system duration=8760h renew=false
while [ $# -gt 0 ]; do
  case $1 in
    --worker-context) worker_context=$2; shift 2 ;;
    --manager-context) manager_context=$2; shift 2 ;;
    --server) server=$2; shift 2 ;;
    --namespace) namespace=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --renew) renew=true; shift ;;
    *) echo "connect-worker.sh: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$worker_context" ] && [ -n "$manager_context" ] || usage
if ! [[ $name =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]]; then
  echo "connect-worker.sh: worker name '$name' is not a valid Kubernetes object name" >&2; exit 2
fi
kubectl=${KUBECTL:-kubectl}
worker() { "$kubectl" --context "$worker_context" "$@"; }
manager() { "$kubectl" --context "$manager_context" "$@"; }

view() { worker config view --raw --minify -o "jsonpath={.clusters[0].cluster.$1}"; }
[ -n "$server" ] || server=$(view server)
ca=$(view certificate-authority-data)
if [ -z "$ca" ]; then
  echo "connect-worker.sh: context $worker_context has no inline certificate-authority-data; the dispatcher refuses CA file paths" >&2
  exit 1
fi
token=$(worker -n "$namespace" create token multikueue-dispatcher --duration "$duration")

kubeconfig=$(mktemp)
trap 'rm -f "$kubeconfig"' EXIT
cat >"$kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: $name
  cluster:
    server: $server
    certificate-authority-data: $ca
users:
- name: multikueue-dispatcher
  user:
    token: $token
contexts:
- name: $name
  context: {cluster: $name, user: multikueue-dispatcher}
current-context: $name
KUBECONFIG

manager -n "$namespace" create secret generic "$name-kubeconfig" --from-file=kubeconfig="$kubeconfig" \
  --dry-run=client -o yaml | manager apply --server-side --force-conflicts --field-manager=connect-worker -f -
manager apply --server-side --force-conflicts --field-manager=connect-worker -f - <<CLUSTER
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata:
  name: $name
  annotations:
    multikueue.x-k8s.io/renew-token: "$renew"
spec:
  clusterSource:
    kubeConfig: {location: $name-kubeconfig, locationType: Secret}
CLUSTER
echo "worker $name connected: Secret $namespace/$name-kubeconfig -> $server, MultiKueueCluster $name" >&2
