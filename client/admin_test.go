package client

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Rule: an admin binding call names exactly the key it was given. Object
// keys may hold '?' and '#' (domain.CheckName allows both, writes escape
// them); pasted into the path unescaped, "unbind local/inv?draft" cleared
// the binding of local/inv.
func TestBindingCallsNameTheWholeKey(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+" query="+r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	c := New(srv.URL, "admin")
	for _, key := range []string{"inv?draft", "inv#draft", "dir/a b%"} {
		got = nil
		if _, err := c.Binding(t.Context(), "local", key); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ClearBinding(t.Context(), "local", key); err != nil {
			t.Fatal(err)
		}
		want := []string{"GET /v1/admin/bindings/local/" + key + " query=", "DELETE /v1/admin/bindings/local/" + key + " query="}
		if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("key %q reached %q, want %q", key, got, want)
		}
	}
}
