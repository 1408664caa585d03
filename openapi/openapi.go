// Package openapi holds Fencegate's OpenAPI 3.1 description (openapi.yaml),
// embedded so that the binary can serve it and tests can hold the router to it.
package openapi

import (
	_ "embed"

	"github.com/getkin/kin-openapi/openapi3"
)

// Spec is the OpenAPI document as written (YAML).
//
//go:embed openapi.yaml
var Spec []byte

// Load parses Spec. It resolves references but does not validate; call
// Validate on the result for that.
func Load() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	return loader.LoadFromData(Spec)
}
