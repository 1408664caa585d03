// Package kit validates the shipped deploy kit without a Docker engine or a
// Kubernetes cluster; see kit_test.go.
package kit
