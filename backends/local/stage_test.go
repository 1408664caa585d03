package local_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
)

// TestAStagingCutShortByCloseChangesNothingAndIsRemovedOnOpen: a staged
// write whose store closes before its Put (a process ending between the
// staging and the admission's answer) is refused, changes no object, and
// leaves only a temp file that the next New removes.
func TestAStagingCutShortByCloseChangesNothingAndIsRemovedOnOpen(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	etag := objecttest.Create(t, s, "k/stage", "v1")
	staged := []fencegate.StagedPut{objecttest.Stage(t, s, "k/stage", "v2", objecttest.Meta(2)),
		objecttest.Stage(t, s, "k/stage", "v2", objecttest.Meta(2))}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := staged[0].Put(context.Background(), etag, false); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("staged put after Close: %v; want BACKEND_UNAVAILABLE", err)
	}
	staged[1].Discard()
	if _, err := s.Stage(context.Background(), fencegate.PutRequest{Key: "k/stage", Body: strings.NewReader("v3"),
		Size: 2, Meta: objecttest.Meta(3)}); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("Stage after Close: %v; want BACKEND_UNAVAILABLE", err)
	}
	s2 := openAt(t, dir)
	defer s2.Close()
	if body, info := objecttest.Content(t, s2, "k/stage"); body != "v1" || info.ETag != etag {
		t.Fatalf("after the reopen the object is %q (%s); want v1 (%s)", body, info.ETag, etag)
	}
	if n := objectDirFiles(t, dir); n != 1 {
		t.Fatalf("%d files in the objects directory after the reopen; want the one object", n)
	}
}

// TestADiscardedStagingsFileIsTheNextWritesSpare: staging and discarding
// in a loop creates no new file (the spare goes back to the pool).
func TestADiscardedStagingsFileIsTheNextWritesSpare(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	defer s.Close()
	objecttest.Create(t, s, "k/spare", "v1")
	before := objectDirFiles(t, dir)
	for i := range 20 {
		objecttest.Stage(t, s, "k/spare", "vv", objecttest.Meta(uint64(i+2))).Discard()
	}
	if after := objectDirFiles(t, dir); after != before+1 {
		t.Fatalf("%d files after 20 discarded stagings, %d before; want one spare more", after, before)
	}
}

// TestAStagingHoldsNoDirectorySyncTicket: a staged write's rename may come
// long after its staging, so the staging registers no writer with the
// directory syncer (a directory fsync would wait up to 500 µs for it), and
// a discarded one leaves none either.
func TestAStagingHoldsNoDirectorySyncTicket(t *testing.T) {
	s := open(t)
	defer s.Close()
	etag := objecttest.Create(t, s, "k/ticket", "v1")
	sp := objecttest.Stage(t, s, "k/ticket", "v2", objecttest.Meta(2))
	if n := local.Tickets(s); n != 0 {
		t.Fatalf("%d directory-sync tickets held after a staging; want 0", n)
	}
	if _, err := sp.Put(context.Background(), etag, false); err != nil {
		t.Fatal(err)
	}
	if n := local.Tickets(s); n != 0 {
		t.Fatalf("%d directory-sync tickets held after the staged put; want 0", n)
	}
}

// panickingBody is a body whose Read panics, as a bug in a reader would.
type panickingBody struct{}

func (panickingBody) Read([]byte) (int, error) { panic("test: a body's Read panics") }

func (panickingBody) Seek(int64, int) (int64, error) { return 0, nil }

// TestAPanickingBodyGivesItsSpareUp: a write or staging whose body panics
// while it is read gives its spare file up as a failed one does (the panic
// goes on to the caller), so repeated panics leave no temp file or open
// descriptor behind, and the object is unchanged.
func TestAPanickingBodyGivesItsSpareUp(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	defer s.Close()
	etag := objecttest.Create(t, s, "k/panic", "v1")
	before := objectDirFiles(t, dir)
	for i := range 10 {
		for _, stage := range []bool{true, false} {
			func() {
				defer func() {
					if recover() == nil {
						t.Fatal("the body's panic did not reach the caller")
					}
				}()
				req := fencegate.PutRequest{Key: "k/panic", Body: panickingBody{}, Size: 2, Meta: objecttest.Meta(uint64(i + 2)), IfMatch: etag}
				if stage {
					_, _ = s.Stage(context.Background(), req)
				} else {
					_, _ = s.Put(context.Background(), req)
				}
			}()
		}
	}
	if after := objectDirFiles(t, dir); after != before {
		t.Fatalf("%d files in the objects directory after 20 panicking writes, %d before; want none left behind", after, before)
	}
	if body, info := objecttest.Content(t, s, "k/panic"); body != "v1" || info.ETag != etag {
		t.Fatalf("the object is %q (%s) after the panicking writes; want v1 (%s)", body, info.ETag, etag)
	}
}
