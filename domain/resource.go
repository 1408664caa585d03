package domain

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// MaxNameLength bounds a resource ID or object key, in bytes.
const MaxNameLength = 1024

// CheckName verifies that s is a canonical slash-separated name: valid UTF-8 in
// NFC, no empty, "." or ".." segments, no leading or trailing slash, no
// backslash, percent sign or control character. Names that fail are refused,
// never normalised into another name.
func CheckName(s string) error {
	if s == "" {
		return Errorf(CodeInvalidRequest, "empty name")
	}
	if len(s) > MaxNameLength {
		return Errorf(CodeInvalidRequest, "name longer than %d bytes", MaxNameLength)
	}
	if !utf8.ValidString(s) {
		return Errorf(CodeInvalidRequest, "name is not valid UTF-8")
	}
	if !norm.NFC.IsNormalString(s) {
		return Errorf(CodeInvalidRequest, "name is not in Unicode NFC")
	}
	for _, r := range s {
		if r == '\\' || r == '%' || unicode.IsControl(r) {
			return Errorf(CodeInvalidRequest, "name contains %q", r)
		}
	}
	for _, seg := range strings.Split(s, "/") {
		switch seg {
		case "":
			return Errorf(CodeInvalidRequest, "name has an empty segment")
		case ".", "..":
			return Errorf(CodeInvalidRequest, "name has a %q segment", seg)
		}
	}
	return nil
}

// ObjectResource is the canonical resource ID of key in object store store:
// "store/key". A grant for resource R covers the object whose ObjectResource is
// R and every object under R + "/".
func ObjectResource(store, key string) string { return store + "/" + key }

// Covers reports whether a grant for resource covers target, under the
// canonical mapping: target equals resource or lies under resource + "/".
// Both must already have passed CheckName; the comparison is byte-exact.
func Covers(resource, target string) bool {
	return target == resource || strings.HasPrefix(target, resource+"/")
}

// ObjectTarget is the target a receipt records for key in object store
// store: "objects/STORE/KEY". The gateway records it and the client finds
// its receipts by it, both from here, so they agree on every object's name.
func ObjectTarget(store, key string) string { return "objects/" + store + "/" + key }

// SplitObjectTarget is the inverse of ObjectTarget.
func SplitObjectTarget(target string) (store, key string, ok bool) {
	rest, ok := strings.CutPrefix(target, "objects/")
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}

// APITarget is the target a receipt records for a call of path on the
// fronted API api: "apis/API/PATH", with one leading "/" of path dropped.
// The gateway records it and the client finds its receipts by it, both
// from here.
func APITarget(api, path string) string { return "apis/" + api + "/" + strings.TrimPrefix(path, "/") }

// BoundAPITarget is the target of a call on a route that binds headers to
// its resource (one path, a resource per header value: Stripe-Account),
// which acts on what those headers select, so its target is its own per
// value: APITarget, then '#' (which no path holds) and the bound headers
// (canonical name to value) as "name=value" pairs, names in lower case,
// sorted, joined by '&'. A target is fenced under one resource
// (CheckTarget), so without them the first account's call would take the
// path from every other. With no bound header it is APITarget.
func BoundAPITarget(api, path string, bound map[string]string) string {
	t := APITarget(api, path)
	if len(bound) == 0 {
		return t
	}
	pairs := make([]string, 0, len(bound))
	for name, v := range bound {
		pairs = append(pairs, strings.ToLower(name)+"="+v)
	}
	slices.Sort(pairs)
	return t + "#" + strings.Join(pairs, "&")
}

// SameCallTarget reports whether a receipt's target is base, the target a
// client computed for its write, or, when base is an APITarget without bound
// headers, base with bound headers: a client does not know which headers a
// route binds, so it finds its call's receipt by this. An object target
// must be base itself ('#' may be part of an object key).
func SameCallTarget(target, base string) bool {
	if target == base {
		return true
	}
	if !strings.HasPrefix(base, "apis/") || strings.Contains(base, "#") {
		return false
	}
	rest, ok := strings.CutPrefix(target, base)
	return ok && strings.HasPrefix(rest, "#")
}

// SplitAPITarget is the inverse of APITarget; path comes back with its
// leading slash, without the bound headers.
func SplitAPITarget(target string) (api, path string, ok bool) {
	rest, ok := strings.CutPrefix(target, "apis/")
	if !ok {
		return "", "", false
	}
	rest, _, _ = strings.Cut(rest, "#")
	api, path, ok = strings.Cut(rest, "/")
	if !ok || api == "" || path == "" {
		return "", "", false
	}
	return api, "/" + path, true
}

// FencedAPIMethods returns the methods of a fenced third-party API call,
// spelled as the gateway routes them (a new slice each call): every other
// method is refused for a call (a GET goes to the API's read routes,
// unfenced). The gateway's routes, the API adapter's route check and the Go
// client all read this one rule.
func FencedAPIMethods() []string { return []string{"POST", "PUT", "PATCH", "DELETE"} }

// IsFencedAPIMethod reports whether method is one of FencedAPIMethods,
// exactly (upper case).
func IsFencedAPIMethod(method string) bool {
	switch method {
	case "POST", "PUT", "PATCH", "DELETE":
		return true
	}
	return false
}
