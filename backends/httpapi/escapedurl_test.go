package httpapi

import (
	"net/url"
	"strings"
	"testing"
)

// TestLookupTemplatePathMustBeWrittenEscaped: a lookup or conflict-fetch
// template whose path holds a literal that an escaped path cannot (a space,
// '|', '^') is refused when the config is read, saying how to write it: with
// it, the escaped path the gateway builds would be invalid and escaped again
// as a whole, the value's %2F sent as '/' ("INV/7" two segments, a 404, and
// NOT_APPLIED for a payout that was made). Written escaped, the value keeps
// its escape.
func TestLookupTemplatePathMustBeWrittenEscaped(t *testing.T) {
	for _, tmpl := range []string{"/v1/payout refs/{ref}", "/v1/a|b/{ref}", "/v1/x^y/{key}"} {
		if err := checkURL(tmpl, "{key}", "{ref}"); err == nil || !strings.Contains(err.Error(), "escaped") {
			t.Fatalf("template %q: %v, want it refused as not escaped", tmpl, err)
		}
	}
	tmpl := "/v1/payout%20refs/{ref}?expand=%7Bsource%7D"
	if err := checkURL(tmpl, "{key}", "{ref}"); err != nil {
		t.Fatalf("escaped template refused: %v", err)
	}
	u, _ := url.Parse("https://api.example/base")
	a := &API{base: u}
	path, query, _ := strings.Cut(strings.ReplaceAll(tmpl, "{ref}", url.PathEscape("INV/7")), "?")
	got, err := a.escapedEndpoint(path, query)
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://api.example/base/v1/payout%20refs/INV%2F7?expand=%7Bsource%7D"; got != want {
		t.Fatalf("lookup URL %s, want %s", got, want)
	}
}
