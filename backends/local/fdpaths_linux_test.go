package local_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
)

// TestEveryPathReleasesItsDescriptors: small and large writes, refused conditions, bodies of the
// wrong size, replaces while a reader holds the old version, replaces of
// spares too large to keep, deletes and failed directory fsyncs each end
// with no descriptor left behind beyond the store's bounded held files and
// spares, and Close releases those too: a long-running store does not leak
// descriptors on its error paths, and every write ends the ticket it took
// for the directory fsync's gathering.
func TestEveryPathReleasesItsDescriptors(t *testing.T) {
	ctx := context.Background()
	before := openFDs(t)
	s, err := local.New("loc", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, bound := local.Held(s)
	put := func(key, body, ifMatch string, none bool) (string, error) {
		return s.Put(ctx, fencegate.PutRequest{Key: key, Body: strings.NewReader(body), Size: int64(len(body)),
			IfMatch: ifMatch, IfNoneMatch: none, Meta: objecttest.Meta(2)})
	}
	for round := range 8 {
		for i := range 10 {
			key := fmt.Sprintf("k/%d", i)
			etag, err := put(key, "v1", "", true)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := put(key, "again", "", true); err == nil { // refused: exists
				t.Fatal("second create succeeded")
			}
			if _, err := put(key, "wrong", `"nope"`, false); err == nil { // refused: If-Match
				t.Fatal("replace with a wrong ETag succeeded")
			}
			if _, err := s.Put(ctx, fencegate.PutRequest{Key: key, Body: strings.NewReader("short"), Size: 9, IfMatch: etag, Meta: objecttest.Meta(2)}); err == nil {
				t.Fatal("body shorter than its size accepted")
			}
			rc, _, err := s.Get(ctx, key) // held across the replace: the old file is not reused
			if err != nil {
				t.Fatal(err)
			}
			if etag, err = put(key, strings.Repeat("x", 1<<20+1), etag, false); err != nil { // over the spare bound next time
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, rc)
			rc.Close()
			if etag, err = put(key, "v3", etag, false); err != nil {
				t.Fatal(err)
			}
			heal := failingDirSync(s)
			if _, err := put(key, "v4", etag, false); err == nil {
				t.Fatal("replace whose directory fsync failed succeeded")
			}
			heal()
			_, info := objecttest.Content(t, s, key)
			if err := s.Delete(ctx, key, info.ETag); err != nil {
				t.Fatal(err)
			}
		}
		// Writers racing on one key (one stripe): most are refused, some
		// find the stripe busy after their file sync.
		objecttest.Create(t, s, "k/race", "v0")
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					if info, err := s.Head(ctx, "k/race"); err == nil {
						_, _ = put("k/race", "raced", info.ETag, false)
					}
				}
			}()
		}
		wg.Wait()
		_, info := objecttest.Content(t, s, "k/race")
		if err := s.Delete(ctx, "k/race", info.ETag); err != nil {
			t.Fatal(err)
		}
		if n := local.Tickets(s); n != 0 {
			t.Fatalf("round %d: %d directory-sync tickets never ended (every later fsync would wait for them)", round, n)
		}
		// Besides the held files: at most the spares, the directory and
		// its lock. A path leaking one descriptor per key exceeds it within
		// the rounds.
		held, _ := local.Held(s)
		if held > bound {
			t.Fatalf("round %d: %d files held, bound %d", round, held, bound)
		}
		if n := openFDs(t) - before - int(held); n > 64+2+1 {
			t.Fatalf("round %d: %d descriptors open besides %d held files: a path leaks", round, n, held)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := openFDs(t); after > before {
		t.Fatalf("%d descriptors open after Close, %d before New", after, before)
	}
}
