package handlers

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authz"
)

// Authenticator establishes the caller's workload identity from the request's
// own credential (never from a grant).
type Authenticator interface {
	Authenticate(r *http.Request) (identity string, err error)
}

// BearerTokens authenticates `Authorization: Bearer <token>` against a fixed
// table of token -> identity, comparing digests in constant time.
type BearerTokens struct {
	entries []bearerEntry
}

type bearerEntry struct {
	sum      [32]byte
	identity string
}

// NewBearerTokens builds the table from token -> identity.
func NewBearerTokens(tokens map[string]string) *BearerTokens {
	b := &BearerTokens{}
	for tok, id := range tokens {
		b.entries = append(b.entries, bearerEntry{sha256.Sum256([]byte(tok)), id})
	}
	return b
}

// Authenticate returns the identity of the bearer token, or UNAUTHENTICATED.
func (b *BearerTokens) Authenticate(r *http.Request) (string, error) {
	tok, err := bearerToken(r.Header)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(tok))
	found := ""
	for _, e := range b.entries {
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 {
			found = e.identity
		}
	}
	if found == "" {
		return "", fencegate.Errorf(fencegate.CodeUnauthenticated, "unknown workload credential")
	}
	return found, nil
}

// bearerToken is the one place the bearer credential is read (workload,
// admin and gateway tokens alike: each is a BearerTokens). A request with
// more than one Authorization line is refused, whatever the lines say:
// Authorization is not a list field (RFC 9110 section 11.6.2; section 5.3
// allows repeated lines only for list fields), and a proxy or log that reads
// the last line would see another caller than the first line names. It is
// UNAUTHENTICATED, the code of every other malformed bearer credential here
// (a missing "Bearer " scheme, an empty token), so it is answered 401 with
// the WWW-Authenticate challenge like them.
func bearerToken(h http.Header) (string, error) {
	lines := h.Values("Authorization")
	if len(lines) > 1 {
		return "", fencegate.Errorf(fencegate.CodeUnauthenticated, "the request has %d Authorization header lines; send exactly one credential", len(lines))
	}
	tok, ok := "", false
	if len(lines) == 1 {
		tok, ok = strings.CutPrefix(lines[0], "Bearer ")
	}
	if !ok || tok == "" {
		return "", fencegate.Errorf(fencegate.CodeUnauthenticated, "an Authorization: Bearer workload credential is required")
	}
	return tok, nil
}

// hasAuthorization reports whether r carries an Authorization credential:
// any non-empty line, so that an empty first line does not hide a second
// one (the console then authenticates the header, which refuses two lines,
// rather than its session cookie).
func hasAuthorization(r *http.Request) bool {
	for _, v := range r.Header.Values("Authorization") {
		if v != "" {
			return true
		}
	}
	return false
}

// ClientCerts authenticates the caller by its verified TLS client
// certificate (mTLS): the identity is the certificate's first URI SAN (a
// SPIFFE ID, say), else "cn:" and its subject common name
// (authz.CNIdentity), which access rules name with identity and no san
// pattern matches: a CN is free text, so one spelled like a URI must not
// pass for a URI SAN. A URI SAN of the scheme cn: is refused, so that no
// URI SAN spells a CN identity. The TLS server must have verified the chain
// against the configured client CA.
type ClientCerts struct{}

// Authenticate returns the identity of the verified client certificate.
func (ClientCerts) Authenticate(r *http.Request) (string, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "", fencegate.Errorf(fencegate.CodeUnauthenticated, "a verified TLS client certificate is required")
	}
	leaf := r.TLS.VerifiedChains[0][0]
	if len(leaf.URIs) > 0 {
		id := leaf.URIs[0].String()
		// crypto/x509 parses a URI SAN with net/url, which lowercases its
		// scheme: one written CN:x in the certificate is cn:x here.
		if authz.IsCNIdentity(id) {
			return "", fencegate.Errorf(fencegate.CodeUnauthenticated, "the client certificate's URI SAN %q has the scheme cn:, which names CN identities", id)
		}
		return id, nil
	}
	if leaf.Subject.CommonName != "" {
		return authz.CNIdentity(leaf.Subject.CommonName), nil
	}
	return "", fencegate.Errorf(fencegate.CodeUnauthenticated, "the client certificate names no identity (URI SAN or CN)")
}
