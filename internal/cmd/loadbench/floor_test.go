package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
)

// TestFloorServerWritesThroughTheLocalStoreConditionally: the floor server
// (this test binary started again) lands each PUT in the gateway's local
// object store, each write conditional on the key's last ETag, with the
// effect metadata (segment, payload digest) a fenced write carries: after
// it stops, the store holds the second body with segment 2.
func TestFloorServerWritesThroughTheLocalStoreConditionally(t *testing.T) {
	dir := t.TempDir()
	g, err := startFloor(context.Background(), dir, "local:"+filepath.Join(dir, "floor-objects"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, body := range []string{"first body", "second body"} {
		req, _ := http.NewRequest(http.MethodPut, g.url+"/o/floor/w0", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			g.stop()
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(data, []byte(`"COMMITTED"`)) {
			g.stop()
			t.Fatalf("write %d: %d %s", i+1, resp.StatusCode, data)
		}
	}
	g.stop()
	st, err := local.New("local", filepath.Join(dir, "floor-objects"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rc, info, err := st.Get(context.Background(), "floor/w0")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "second body" {
		t.Fatalf("object holds %q, want the second body", got)
	}
	m := info.Metadata
	if m[fencegate.MetaSegment] != "2" || !strings.HasPrefix(m[fencegate.MetaPayload], "sha256:") || m[fencegate.MetaReceipt] == "" {
		t.Fatalf("effect metadata %v: want segment 2, a digest and a receipt ID", m)
	}
}
