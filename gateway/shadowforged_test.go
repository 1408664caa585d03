package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
)

// TestShadowMetadataWrittenBehindTheGatewayIsNotAdopted: a writer behind
// the gateway's back (direct bucket access, or a restore or copy of an
// object a shadow forward once wrote) puts an object whose metadata names a
// shadow receipt that no forward of this process left unknown. Every write
// of the target stays BACKEND_CONFLICT and the change is never overwritten
// (DESIGN §4: never overwrite blindly); only this process's own shadow
// forwards of unknown outcome have their versions adopted.
func TestShadowMetadataWrittenBehindTheGatewayIsNotAdopted(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.gw.Apply(ctx, f.request(6, 1, "new")); err != nil {
		t.Fatal(err)
	}
	// Out of band: an unconditional put with metadata nobody authenticates.
	body := "out-of-band"
	cur, err := f.obj.ObjectStore.Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.obj.ObjectStore.Put(ctx, fencegate.PutRequest{Key: key, Body: strings.NewReader(body), Size: int64(len(body)), IfMatch: cur.ETag,
		Meta: fencegate.EffectMeta{FenceToken: 1, Segment: 1, ReceiptID: "shadow_forged"}}); err != nil {
		t.Fatal(err)
	}
	for try := 1; try <= 2; try++ {
		if _, err := f.gw.Apply(ctx, f.request(6, 2, "new2")); fencegate.ErrorCode(err) != fencegate.CodeBackendConflict || f.content() != body {
			t.Fatalf("write %d after the out-of-band change: %v, object %q; want BACKEND_CONFLICT and the change kept", try, err, f.content())
		}
	}
}
