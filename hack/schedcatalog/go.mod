// A placeholder: it marks this folder as a module root. The program is always built against one
// pinned Kubernetes minor, `go run -modfile=../k8s/<minor>/go.mod .`, whose go.mod and go.sum
// (beside it) name the versions; see hack/schedcatalog/README.md.
module kubeherd.local/hack/schedcatalog

go 1.26.0
