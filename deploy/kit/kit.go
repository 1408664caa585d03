// Package kit checks the shipped deploy kit (deploy/Dockerfile,
// deploy/compose, deploy/kube, deploy/systemd) without a Docker engine or a
// Kubernetes cluster: the Dockerfile's go build lines run with their exact
// flags, the compose file is validated against the compose specification's
// schema, every kustomize overlay is built and each object decoded strictly
// against the Kubernetes API types, and the systemd unit passes
// systemd-analyze. It is a module of its own so the main module never pulls
// k8s.io; scripts/test.sh runs it.
package kit
