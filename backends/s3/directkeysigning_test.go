package s3_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/objecttest"
	fs3 "github.com/fencegate/fencegate/backends/s3"
)

// TestDirectPutSignsEveryKeyAsTheStoreVerifiesIt: a direct PUT of a key
// with characters SigV4 escapes (space, '+', '~', '!*'()', '=', ':', '@',
// unicode) and user metadata with spaces is accepted by a store that checks
// the signature, and reads back under the same key.
func TestDirectPutSignsEveryKeyAsTheStoreVerifiesIt(t *testing.T) {
	s := server(t)
	if !fs3.Direct(s) {
		t.Fatal("no put template")
	}
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Minute))
	for _, key := range []string{"a b", "c+d", "t~i", "x!*'()y", "e=f:g@h", "ünï/çødé", "日本/語", "sp  two", "sem;col,comma$&"} {
		_, err := s.Put(ctx, fencegate.PutRequest{Key: key, Body: strings.NewReader("v:" + key), Size: int64(len("v:" + key)), IfNoneMatch: true,
			Meta:     fencegate.EffectMeta{FenceToken: 1, Segment: 1, ReceiptID: "r"},
			UserMeta: map[string]string{"note": "two  spaces  inside", "trail": "x "}})
		if err != nil {
			t.Errorf("put %q: %v", key, err)
			continue
		}
		if body, _ := objecttest.Content(t, s, key); body != "v:"+key {
			t.Errorf("key %q reads %q", key, body)
		}
	}
}
