// Package openapi holds Fencegate's OpenAPI 3.1 description (openapi.yaml),
// embedded so that the binary serves it (GET /openapi.yaml) and tests hold
// the router, its answers and a generated client to it. The package imports
// no OpenAPI library, so serving the spec adds nothing but its bytes to the
// binary; the tests parse it with kin-openapi.
package openapi

import _ "embed"

// Spec is the OpenAPI document as written (YAML), byte for byte what
// GET /openapi.yaml answers.
//
//go:embed openapi.yaml
var Spec []byte

// MediaType is the media type Spec is served as (RFC 9512).
const MediaType = "application/yaml"
