package prooftest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
)

// DecodePayload reads the payload of a compact JWS (header, payload and
// signature, dot-separated) into v without verifying its signature, and
// answers its bytes. It fails on a token that is not three parts or whose
// payload is not v's JSON.
func DecodePayload(token string, v any) ([]byte, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("compact JWS: %d parts, want 3", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("compact JWS payload: %w", err)
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return nil, fmt.Errorf("compact JWS payload: %w", err)
	}
	return payload, nil
}

// PayloadOf is DecodePayload failing t (at the caller's line) on a token
// that does not decode.
func PayloadOf(t testing.TB, token string, v any) []byte {
	t.Helper()
	payload, err := DecodePayload(token, v)
	if err != nil {
		t.Fatal(err)
	}
	return payload
}

// DecodeGrant reads the claims of a grant token without verifying its
// signature (DecodePayload), so a test can look at what was issued or sign
// the same claims with another key.
func DecodeGrant(token string) (fencegate.Grant, error) {
	var g fencegate.Grant
	_, err := DecodePayload(token, &g)
	return g, err
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
