#!/usr/bin/env bash
# Pin one Kubernetes release as a wrapper module: hack/k8s/<minor>/go.mod and go.sum, from which
# the local binaries are built and the scheduler catalog is derived. Usage: hack/k8s/pin.sh v1.38.0
set -euo pipefail
version=${1:?usage: $0 vMAJOR.MINOR.PATCH}
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "not a release: $version" >&2; exit 1; }
minor="1.${BASH_REMATCH[1]}"
staging="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
here=$(cd "$(dirname "$0")" && pwd)
folder="$here/$minor"
export GOTOOLCHAIN=local GOFLAGS=-modcacherw
module=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
mkdir -p "$folder"
rm -f "$folder/go.mod" "$folder/go.sum"
cd "$folder"
go mod init "kubeherd.local/hack/k8s/$minor" 2>/dev/null
go mod edit -go="$(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1.0/')" -godebug default=go1.26
# k8s.io/kubernetes replaces its staging modules with folders the module zip leaves out: name
# their releases instead (v0.MINOR.PATCH for v1.MINOR.PATCH).
for staged in $(sed -n 's#^\t\(k8s.io/[a-z-]*\) => ./staging/.*#\1#p' "$module"); do
  go mod edit -replace "$staged=$staged@$staging"
done
# What hack/localcluster/binaries.py builds from it, as tools of the wrapper module.
go get -tool $(printf "k8s.io/kubernetes/cmd/%s@$version " \
  kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy) 2>&1 | tail -1
echo "pinned $version in $folder"
