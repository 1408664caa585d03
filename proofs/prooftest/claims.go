package prooftest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
)

// DecodeGrant reads the claims of a grant token (a compact JWS: header,
// payload and signature, dot-separated) without verifying its signature, so
// a test can look at what was issued or sign the same claims with another
// key. It fails on a token that is not three parts or whose payload is not a
// grant's JSON.
func DecodeGrant(token string) (fencegate.Grant, error) {
	var g fencegate.Grant
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return g, fmt.Errorf("grant token: %d parts, want 3", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return g, fmt.Errorf("grant token payload: %w", err)
	}
	if err := json.Unmarshal(payload, &g); err != nil {
		return g, fmt.Errorf("grant token payload: %w", err)
	}
	return g, nil
}

// GrantOf is DecodeGrant failing t (at the caller's line) on a token that
// does not decode.
func GrantOf(t testing.TB, token string) fencegate.Grant {
	t.Helper()
	g, err := DecodeGrant(token)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
