#!/usr/bin/env bash
# Builds one Kubernetes release's control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), etcd and, for the node, kubelet and kube-proxy from the Go module
# proxy into $FLOE_CACHE/bin. The node's binaries have a stamp of their own, so adding them
# never rebuilds the control plane.
# k8s.io/kubernetes replaces its staging modules with local paths, which a plain
# `go install pkg@version` refuses, so a wrapper module pins each staging module instead.
set -euo pipefail
: "${FLOE_CACHE:=$HOME/.cache/floe}"
: "${KUBE_VERSION:=1.34.10}"
: "${ETCD_VERSION:=3.6.5}"
bin="$FLOE_CACHE/bin"
mkdir -p "$bin"
staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller"

fail() { echo "build-kube: $*" >&2; exit 1; }

# The wrapper module in $dir: k8s.io/kubernetes with every staging module pinned.
wrapper() {
  local dir="$FLOE_CACHE/build/kube-v$KUBE_VERSION"
  mkdir -p "$dir"
  cd "$dir"
  {
    echo "module floe.local/kubebuild"
    echo "go 1.24"
    echo "require k8s.io/kubernetes v$KUBE_VERSION"
    for m in $staging; do echo "replace k8s.io/$m => k8s.io/$m v0.${KUBE_VERSION#1.}"; done
  } > go.mod
  GOFLAGS=-mod=mod go mod download k8s.io/kubernetes || fail "could not download k8s.io/kubernetes v$KUBE_VERSION from the Go module proxy"
}

# go build each of "$@" (cmd names) into $FLOE_CACHE/bin, then touch the stamp $1.
build_cmds() {
  local stamp="$1"; shift
  [ -f "$stamp" ] && return 0
  wrapper
  local commit
  commit=$(curl -fsS "https://proxy.golang.org/k8s.io/kubernetes/@v/v$KUBE_VERSION.info" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("Origin",{}).get("Hash",""))' || true)
  local v=k8s.io/component-base/version
  local ld="-s -w -X $v.gitVersion=v$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2) -X $v.gitCommit=$commit -X $v.gitTreeState=clean -X $v.buildDate=2000-01-01T00:00:00Z"
  local tmp="$PWD/out"
  mkdir -p "$tmp"
  for c in "$@"; do
    echo "build-kube: building $c v$KUBE_VERSION"
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$tmp/$c" "k8s.io/kubernetes/cmd/$c" \
      || fail "could not build $c v$KUBE_VERSION (modules from the Go module proxy)"
  done
  for c in "$@"; do mv -f "$tmp/$c" "$bin/$c"; done
  touch "$stamp"
}

build_kube() { build_cmds "$bin/.kube-v$KUBE_VERSION" kube-apiserver kube-controller-manager kube-scheduler kubectl; }

build_node() { build_cmds "$bin/.node-v$KUBE_VERSION" kubelet kube-proxy; }

build_etcd() {
  # etcd's server module carries replace lines too, so it gets a wrapper module as well.
  local stamp="$bin/.etcd-v$ETCD_VERSION"
  [ -f "$stamp" ] && return 0
  echo "build-kube: building etcd v$ETCD_VERSION"
  local dir="$FLOE_CACHE/build/etcd-v$ETCD_VERSION"
  mkdir -p "$dir/out"
  cd "$dir"
  printf 'module floe.local/etcdbuild\ngo 1.24\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" > go.mod
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o out/etcd go.etcd.io/etcd/server/v3 \
    || fail "could not build etcd v$ETCD_VERSION (go.etcd.io/etcd/server/v3 from the Go module proxy)"
  mv -f out/etcd "$bin/etcd"
  touch "$stamp"
}

case "${1:-all}" in
  kube) build_kube ;;
  etcd) build_etcd ;;
  node) build_node ;;
  all) build_etcd; build_kube ;;
  *) fail "usage: build-kube.sh [all|kube|etcd|node]" ;;
esac
