package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencegate/fencegate/domain"
)

// Rule: GetObject gives the object's operation ID and root as the text they
// are, which the gateway sends as RFC 2047 encoded words when they would not
// travel as they are (not printable ASCII, or spaces at an end, which HTTP
// trims: domain.EncodeHeaderText).
func TestGetObjectReadsEncodedOperationFields(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Fence-Root", domain.EncodeHeaderText("Wurzel-Größe"))
		w.Header().Set("Fence-Operation-Id", domain.EncodeHeaderText(" order 42 ")) // HTTP would trim the spaces
		w.Header().Set("Fence-Token", "7")
		_, _ = io.WriteString(w, "x")
	}))
	defer srv.Close()
	rc, info, err := New(srv.URL, "tok").GetObject(context.Background(), "bucket", "k")
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if info.Root != "Wurzel-Größe" || info.OperationID != " order 42 " || info.FenceToken != 7 {
		t.Fatalf("object info %+v", info)
	}
}
