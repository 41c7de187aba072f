// Marks this folder as a module root only. The plugin is built with the requirements of the
// newest pinned Kubernetes minor: go build -modfile=../k8s/<minor>/go.mod (see
// hack/localcluster/images.py), so that it links exactly the kube-scheduler the cluster runs.
module kubeherd.local/hack/schedplugin

go 1.26.0
