package domain_test

import (
	"testing"

	"github.com/fencegate/fencegate/domain"
)

// Rule: a number a request carries is a canonical decimal: digits only, no
// sign, space, separator or leading zero, at most 2^64-1.
func TestANumberARequestCarriesIsACanonicalDecimal(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "1": true, "42": true, "18446744073709551615": true,
		"": false, "01": false, "00": false, "+1": false, "-1": false, " 1": false, "1 ": false,
		"1_000": false, "0x1": false, "1e3": false, "18446744073709551616": false, "٢": false,
	} {
		if _, ok := domain.ParseCanonicalUint(s); ok != want {
			t.Errorf("ParseCanonicalUint(%q) ok = %v, want %v", s, ok, want)
		}
	}
	if n, ok := domain.ParseCanonicalUint("42"); !ok || n != 42 {
		t.Fatalf("ParseCanonicalUint(\"42\") = %d %v", n, ok)
	}
}
