package domain

import "testing"

// Rule: a fenced API call is POST, PUT, PATCH or DELETE, spelled in upper
// case; IsFencedAPIMethod answers exactly the list FencedAPIMethods returns,
// and a caller changing the list it got changes nobody else's.
func TestFencedAPIMethodsAreTheFourWritesInUpperCase(t *testing.T) {
	got := FencedAPIMethods()
	want := []string{"POST", "PUT", "PATCH", "DELETE"}
	if len(got) != len(want) {
		t.Fatalf("FencedAPIMethods() = %v, want %v", got, want)
	}
	for i, m := range want {
		if got[i] != m || !IsFencedAPIMethod(m) {
			t.Fatalf("FencedAPIMethods() = %v, IsFencedAPIMethod(%q) = %v; want %v, all fenced", got, m, IsFencedAPIMethod(m), want)
		}
	}
	for _, m := range []string{"GET", "HEAD", "OPTIONS", "CONNECT", "TRACE", "post", "Put", "", " POST"} {
		if IsFencedAPIMethod(m) {
			t.Errorf("IsFencedAPIMethod(%q) = true, want false", m)
		}
	}
	got[0] = "GET"
	if FencedAPIMethods()[0] != "POST" || IsFencedAPIMethod("GET") {
		t.Fatal("changing the returned list changed the rule")
	}
}
