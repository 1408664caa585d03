package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate"
)

// Key shapes, with where each limit is documented.
const (
	// DefaultKeyMaxLength is Square's limit for idempotency_key (45), the
	// shortest of the listed APIs: Stripe takes 255
	// (docs.stripe.com/api/idempotent_requests), Adyen 64
	// (docs.adyen.com/development-resources/api-idempotency).
	DefaultKeyMaxLength = 45
	// minKeyHex is the shortest digest a key may carry: 128 bits.
	minKeyHex = 32
	// KeyPrefix starts every key, so an operator can tell the gateway's keys apart.
	KeyPrefix = "fg"
)

// Key character sets a Key may declare.
const (
	// CharsetToken allows letters, digits, '-', '_' and '.' (the default).
	CharsetToken = "token"
	// CharsetAlphanumeric allows letters and digits only.
	CharsetAlphanumeric = "alphanumeric"
)

// Key says where an API wants the idempotency key and what shape it must
// have. The key stays deterministic: KeyPrefix (and '-' when the character
// set allows it) followed by lowercase hex of SHA-256 over resource, root,
// fence and segment, cut to MaxLength (never below 128 bits).
type Key struct {
	// Header carries the key (default Idempotency-Key; PayPal-Request-Id,
	// Cko-Idempotency-Key, ...). Exclusive with BodyField.
	Header string `yaml:"header"`
	// BodyField is a JSON pointer (RFC 6901) to a member of a JSON object
	// body that carries the key instead (Square: /idempotency_key). The
	// gateway sets it, replacing whatever the worker put there.
	BodyField string `yaml:"bodyField"`
	// MaxLength bounds the key (default DefaultKeyMaxLength).
	MaxLength int `yaml:"maxLength"`
	// Charset is CharsetToken (default) or CharsetAlphanumeric.
	Charset string `yaml:"charset"`
}

func (k Key) withDefaults() Key {
	if k.Header == "" && k.BodyField == "" {
		k.Header = DefaultIdempotencyHeader
	}
	if k.MaxLength == 0 {
		k.MaxLength = DefaultKeyMaxLength
	}
	if k.Charset == "" {
		k.Charset = CharsetToken
	}
	return k
}

func (k Key) validate() []string {
	var errs []string
	if k.Header != "" && k.BodyField != "" {
		errs = append(errs, "key: header and bodyField are exclusive")
	}
	if k.Header != "" && !validHeaderName(k.Header) {
		errs = append(errs, fmt.Sprintf("key.header %q is not a valid header name", k.Header))
	}
	if k.BodyField != "" {
		if _, err := parsePointer(k.BodyField); err != nil || k.BodyField == "" {
			errs = append(errs, fmt.Sprintf("key.bodyField %q is not a JSON pointer to a member", k.BodyField))
		}
	}
	switch k.Charset {
	case CharsetToken, CharsetAlphanumeric:
	default:
		errs = append(errs, fmt.Sprintf("key.charset %q must be %s or %s", k.Charset, CharsetToken, CharsetAlphanumeric))
	}
	if k.MaxLength < len(k.prefix())+minKeyHex {
		errs = append(errs, fmt.Sprintf("key.maxLength %d leaves fewer than 128 bits of digest; it must be at least %d", k.MaxLength, len(k.prefix())+minKeyHex))
	}
	return errs
}

func (k Key) prefix() string {
	if k.Charset == CharsetAlphanumeric {
		return KeyPrefix
	}
	return KeyPrefix + "-"
}

// For is the key of a receipt's effect, shaped by k (defaults applied).
func (k Key) For(r fencegate.Receipt) string {
	h := sha256.New()
	h.Write([]byte(r.Resource))
	h.Write([]byte{0})
	h.Write([]byte(r.OperationRoot))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatUint(r.FenceToken, 10)))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatUint(r.Segment, 10)))
	sum := hex.EncodeToString(h.Sum(nil))
	p := k.prefix()
	return p + sum[:min(len(sum), k.MaxLength-len(p))]
}

// IdempotencyKey is the default-shaped key of a receipt's effect:
// "fg-" + 42 hex characters of SHA-256 over resource, root, fence and
// segment (45 characters). Every attempt of the same segment sends it.
func IdempotencyKey(r fencegate.Receipt) string { return Key{}.withDefaults().For(r) }

// placeInBody sets the member at the JSON pointer ptr of the JSON object body
// to key and re-encodes it (numbers kept as written, members sorted).
func placeInBody(body []byte, ptr, key string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("the body is not JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("the body has data after its JSON value")
	}
	toks, _ := parsePointer(ptr)
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the body is not a JSON object")
	}
	for i, t := range toks {
		if i == len(toks)-1 {
			obj[t] = key
			break
		}
		next, ok := obj[t].(map[string]any)
		if !ok {
			if obj[t] != nil {
				return nil, fmt.Errorf("%s crosses a member that is not an object", ptr)
			}
			next = map[string]any{}
			obj[t] = next
		}
		obj = next
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// parsePointer splits an RFC 6901 JSON pointer into unescaped reference
// tokens; "" is the whole document.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("a JSON pointer starts with /")
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(s, "~0", ""), "~1", ""), "~") {
			return nil, fmt.Errorf("bad escape in %q", s)
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

// lookupPointer resolves toks in a decoded JSON document.
func lookupPointer(doc any, toks []string) (any, bool) {
	for _, t := range toks {
		switch v := doc.(type) {
		case map[string]any:
			var ok bool
			if doc, ok = v[t]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(v) || (len(t) > 1 && t[0] == '0') {
				return nil, false
			}
			doc = v[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// scalarText is a JSON scalar as text (strings unquoted), ok false otherwise.
func scalarText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// decodeJSON decodes a JSON document keeping numbers as written.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	return doc, nil
}
