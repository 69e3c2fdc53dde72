#!/usr/bin/env bash
# Three kind clusters (mk-manager, mk-worker1, mk-worker2) with Kueue, Tekton and this dispatcher, for machines
# with Docker and internet access. The e2e suite's `kind` provider runs this, then the same scenarios as on the
# other providers. Everything it creates is removed by e2e/kind/down.sh.
#
#   KUEUE_VERSION, TEKTON_VERSION, KIND_NODE_IMAGE may be overridden.
set -euo pipefail
cd "$(dirname "$0")/../.."

KUEUE_VERSION=${KUEUE_VERSION:-v0.19.2}
TEKTON_VERSION=${TEKTON_VERSION:-v1.15.0}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.35.0}
IMAGE=${IMAGE:-multikueue:e2e}
CLUSTERS=(mk-manager mk-worker1 mk-worker2)

say() { printf '[kind] %s\n' "$*" >&2; }
need() { command -v "$1" >/dev/null || { say "$1 is not installed: $2"; exit 3; }; }
need kind "https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
need docker "https://docs.docker.com/engine/install/"
need kubectl "https://kubernetes.io/docs/tasks/tools/"
docker info >/dev/null 2>&1 || { say "no Docker engine answers (docker info failed)"; exit 3; }
# kind pulls its node image and the manifests below come from GitHub: fail now, not half-way through.
curl -fsS --max-time 10 -o /dev/null https://github.com \
  || { say "github.com is not reachable: the kind provider needs internet access (manifests and images)"; exit 3; }

for c in "${CLUSTERS[@]}"; do
  if kind get clusters | grep -qx "$c"; then say "$c exists"; else say "creating $c"; kind create cluster --name "$c" --image "$KIND_NODE_IMAGE" --wait 120s; fi
done

say "building $IMAGE from the Dockerfile and loading it into mk-manager"
docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name mk-manager

for c in "${CLUSTERS[@]}"; do
  say "installing Kueue $KUEUE_VERSION on $c"
  kubectl --context "kind-$c" apply --server-side -f "https://github.com/kubernetes-sigs/kueue/releases/download/$KUEUE_VERSION/manifests.yaml"
done
for c in mk-worker1 mk-worker2; do
  say "installing Tekton $TEKTON_VERSION on $c"
  kubectl --context "kind-$c" apply -f "https://storage.googleapis.com/tekton-releases/pipeline/previous/$TEKTON_VERSION/release.yaml"
done
say "installing Tekton's CRDs on mk-manager (no Tekton controller there: manager PipelineRuns carry managedBy)"
kubectl --context kind-mk-manager apply -f "https://storage.googleapis.com/tekton-releases/pipeline/previous/$TEKTON_VERSION/release.yaml" \
  --selector 'app.kubernetes.io/component!=controller' >/dev/null || true
for c in "${CLUSTERS[@]}"; do
  kubectl --context "kind-$c" -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s
done

say "applying config/manager with image $IMAGE; config/worker on the workers"
kubectl --context kind-mk-manager apply --server-side -k config/manager
kubectl --context kind-mk-manager -n multikueue-system set image deployment/multikueue-controller controller="$IMAGE"
for w in worker1 worker2; do
  kubectl --context "kind-mk-$w" apply --server-side -k config/worker
  # Inside the manager's pods the worker is reached at its control-plane container's address on the kind network.
  server="https://mk-$w-control-plane:6443"
  KUBECTL=kubectl config/worker/connect-worker.sh "$w" --worker-context "kind-mk-$w" --manager-context kind-mk-manager --server "$server"
done
say "ready: contexts kind-mk-manager, kind-mk-worker1, kind-mk-worker2"
