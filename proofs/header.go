package proofs

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/internal/strictjson"
	"github.com/lestrrat-go/jwx/v2/jwa"
)

// protectedHeader is the only header shape accepted.
type protectedHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ"`
}

// Header members that would let a token choose its own key or certificate.
var keySourceMembers = []string{"jku", "x5u", "jwk", "x5c"}

// parseHeader parses the protected header strictly: one JSON object without
// duplicate keys or trailing data, no key-source member (jku, x5u, jwk, x5c),
// no crit, nothing but alg, kid and typ, all non-empty strings, and an alg in
// the allow-list. extra, unless "", names one more member, then required (a
// bundle signature's bundleVersion), whose raw value it answers for the
// caller to check.
func parseHeader(data []byte, extra string) (h protectedHeader, extraValue json.RawMessage, err error) {
	keys, err := strictjson.Check(data)
	if err != nil {
		return h, nil, err
	}
	for _, name := range keySourceMembers {
		if contains(keys, name) {
			return h, nil, fmt.Errorf("member %q is refused: keys come only from the trust bundle", name)
		}
	}
	if contains(keys, "crit") {
		return h, nil, errors.New(`member "crit" is refused: no extension is understood`)
	}
	for _, k := range keys {
		if k != "alg" && k != "kid" && k != "typ" && (extra == "" || k != extra) {
			return h, nil, fmt.Errorf("member %s is not allowed", strictjson.Quote(k))
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return h, nil, fmt.Errorf("malformed JSON: %v", err)
	}
	if extra != "" {
		var ok bool
		if extraValue, ok = m[extra]; !ok {
			return h, nil, fmt.Errorf("%q is required", extra)
		}
	}
	str := func(name string) (string, error) {
		raw, ok := m[name]
		if !ok {
			return "", fmt.Errorf("%q is required", name)
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || s == "" {
			return "", fmt.Errorf("%q must be a non-empty string", name)
		}
		return s, nil
	}
	if h.Alg, err = str("alg"); err != nil {
		return h, nil, err
	}
	if strings.EqualFold(h.Alg, "none") {
		return h, nil, errors.New(`alg "none" is refused`)
	}
	if !Allowed(jwa.SignatureAlgorithm(h.Alg)) {
		return h, nil, fmt.Errorf("alg %s is not in the allow-list", strictjson.Quote(h.Alg))
	}
	if h.Kid, err = str("kid"); err != nil {
		return h, nil, err
	}
	if h.Typ, err = str("typ"); err != nil {
		return h, nil, err
	}
	return h, extraValue, nil
}
