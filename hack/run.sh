#!/usr/bin/env bash
# `make run`: the quickstart. Starts the local control plane with fake nodes (or, with
# CLUSTER=current, uses the current kubeconfig context), installs the chart's CRDs and RBAC,
# applies examples/, prints what to try, and runs the operator in the foreground.
#
# Called by the Makefile with UV set; KUBEHERD_CLUSTER_DIR, NODES, REAL_NODE and K8S_VERSION are
# honoured as by `make cluster-up`.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${UV:?run this through make run}"
CLUSTER=${CLUSTER:-local}
localcluster() { PYTHONPATH=hack "$UV" run --frozen python -m localcluster "$@"; }
binary() { awk -v name="$1" '$1 == name {print $2}' <<<"$BINARIES"; }

if [[ $CLUSTER != local && -n ${K8S_VERSION:-} ]]; then
  echo "K8S_VERSION chooses the local cluster's version: it cannot apply with CLUSTER=$CLUSTER" >&2
  exit 2
fi

echo "==> Building (or finding) the control-plane binaries${K8S_VERSION:+ of Kubernetes $K8S_VERSION}, kubectl and helm"
version=(${K8S_VERSION:+"--kubernetes-version=$K8S_VERSION"})
BINARIES=$(localcluster build "${version[@]}")
KUBECTL=$(binary kubectl)
HELM=$(binary helm)

case "$CLUSTER" in
  local)
    if [[ -n ${REAL_NODE:-} && ${REAL_NODE} != 0 ]]; then
      echo "==> Starting the local control plane${K8S_VERSION:+ at Kubernetes $K8S_VERSION} with ${NODES:-3} fake nodes and a real node"
    else
      echo "==> Starting the local control plane${K8S_VERSION:+ at Kubernetes $K8S_VERSION} with ${NODES:-3} fake nodes"
    fi
    localcluster up "${version[@]}"
    CLUSTER_DIR=${KUBEHERD_CLUSTER_DIR:-.cluster}
    export KUBECONFIG=$PWD/$CLUSTER_DIR/kubeconfig
    [[ $CLUSTER_DIR = /* ]] && KUBECONFIG=$CLUSTER_DIR/kubeconfig
    try_env="export KUBECONFIG=$KUBECONFIG PATH=$(dirname "$KUBECONFIG")/bin:\$PATH"
    # kwok pods run nothing: without a real node the SchedulerProfiles' scheduler pods never
    # bind a pod here.
    try_local="
  kubectl label node worker-1 monitoring=enabled    # node-exporter starts on worker-1
  kubectl get pods -n kube-system -l app=log-shipper   # Pending: see the README's Troubleshooting"
    ;;
  current)
    context=$("$KUBECTL" config current-context) || {
      echo "CLUSTER=current: no current kubeconfig context (KUBECONFIG, else ~/.kube/config)" >&2
      exit 1
    }
    echo "==> Using the current kubeconfig context: $context"
    try_env="# kubectl with your current context ($context)"
    try_local=""
    ;;
  *)
    echo "CLUSTER must be 'local' (the default) or 'current', not '$CLUSTER'" >&2
    exit 2
    ;;
esac

echo "==> Installing the chart's CRDs and RBAC (release kubeherd in kubeherd-system, 0 replicas:"
echo "    the operator runs here, in the foreground)"
"$HELM" upgrade --install kubeherd charts/kubeherd --namespace kubeherd-system \
  --create-namespace --take-ownership --force-conflicts --set replicaCount=0 >/dev/null
"$KUBECTL" wait --for=condition=Established --timeout=60s \
  crd/customdaemonsets.kubeherd.io crd/schedulerprofiles.kubeherd.io >/dev/null

echo "==> Applying examples/"
"$KUBECTL" apply -f examples/

if [[ $CLUSTER = local && -n ${REAL_NODE:-} && ${REAL_NODE} != 0 ]]; then
  # kwok pods run nothing: the SchedulerProfiles' kube-scheduler pods go to the real node, where
  # they run for real, take their Lease and bind the pods that name them (log-shipper).
  echo "==> Placing the SchedulerProfiles' scheduler pods on the real node"
  for profile in $("$KUBECTL" get schedulerprofiles -A \
      -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}'); do
    "$KUBECTL" patch schedulerprofile -n "${profile%%/*}" "${profile##*/}" --type=merge \
      -p '{"spec":{"nodeSelector":{"kubeherd.io/real-node":"true"}}}' >/dev/null
  done
  try_local="
  kubectl label node worker-1 monitoring=enabled    # node-exporter starts on worker-1
  kubectl get pods -n kube-system -o wide -l app=log-shipper   # bound by node-agent-scheduler"
fi

cat <<EOF

kubeherd runs below (Ctrl-C stops it; the cluster keeps running, \`make cluster-down\` stops it).
In another terminal, try:

  $try_env
  kubectl get cds,sp -A
  kubectl describe cds -n kube-system fluentd-elasticsearch
  kubectl describe sp -n kube-system three-profiles
  kubectl get events -n kube-system --field-selector involvedObject.kind=CustomDaemonSet$try_local
  curl -s http://127.0.0.1:${METRICS_PORT:-8081}/metrics | grep ^kubeherd_customdaemonset_

EOF
# No health endpoints: nothing probes a process in a terminal. Metrics on loopback only.
exec "$UV" run --frozen kubeherd run --health-address= --metrics-address="127.0.0.1:${METRICS_PORT:-8081}"
