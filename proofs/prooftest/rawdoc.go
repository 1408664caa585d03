package prooftest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/proofs"
)

// rawEscapes undoes the escapes Bundle.Marshal writes (encoding/json's
// HTML escaping and its escaping of U+2028, U+2029).
var rawEscapes = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&", `\u2028`, "\u2028", `\u2029`, "\u2029")

// RawRevokingDoc is an operator's document for the bundle cur, at version,
// with cur's keys, revoking the key IDs ids, with every character Marshal
// escapes written raw (an operator's document may hold them so; the
// registry serves what Marshal writes). It answers the raw document and the
// document as Marshal writes it, failing t if either cannot be made or the
// raw one does not parse.
func RawRevokingDoc(t testing.TB, cur *proofs.Bundle, version uint64, ids []string) (raw, served []byte) {
	t.Helper()
	b, err := proofs.NewRevokingBundle(version, proofs.Revocations{KeyIDs: ids}, cur.Keys()...)
	if err != nil {
		t.Fatal(err)
	}
	served, err = b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	raw = []byte(rawEscapes.Replace(string(served)))
	if _, err := proofs.ParseBundle(raw); err != nil {
		t.Fatalf("the raw document does not parse (%v)", err)
	}
	return raw, served
}

// OverServedDoc is RawRevokingDoc of cur one version up revoking 1,500 key
// IDs of 300 '<' each: within proofs.MaxBundleSize as sent, more than
// twice it as Marshal writes it (each '<' as the six bytes \u003c), failing
// t otherwise. A registry must refuse to publish it.
func OverServedDoc(t testing.TB, cur *proofs.Bundle) (raw, served []byte) {
	t.Helper()
	ids := make([]string, 1500)
	for i := range ids {
		ids[i] = strings.Repeat("<", 300) + strconv.Itoa(i)
	}
	raw, served = RawRevokingDoc(t, cur, cur.Version()+1, ids)
	if len(raw) > proofs.MaxBundleSize || len(served) <= 2*proofs.MaxBundleSize {
		t.Fatalf("the document is %d bytes, %d as served: want within the limit and over twice it", len(raw), len(served))
	}
	return raw, served
}
