package s3door

import (
	"path/filepath"
	"testing"
	"time"
)

// Rule: a reservation whose upload is forgotten (aborted or swept) while
// its part is read goes back to the budget and to its identity's share when
// it settles, and an identity holding nothing keeps no entry.
func TestAReservationOfAForgottenUploadGoesBackToItsIdentity(t *testing.T) {
	us := newUploads(t.TempDir(), time.Now, 48<<20, 12<<20)
	u := &upload{id: "mpu_1", identity: "a", dir: filepath.Join(us.dir, "mpu_1"), parts: map[int]*part{}}
	if err := us.add(u); err != nil {
		t.Fatal(err)
	}
	if err := us.reserve(u.identity, 12<<20); err != nil {
		t.Fatal(err)
	}
	if err := us.reserve(u.identity, MinPartCharge); err == nil {
		t.Fatal("a reservation past the identity's share was taken")
	}
	us.remove(u) // aborted while the part was read
	us.settle(u, 12<<20, 0)
	if us.held != 0 || len(us.ours) != 0 {
		t.Fatalf("after the forgotten upload's part settled: budget holds %d, identities %v", us.held, us.ours)
	}
}

// Rule: an upload a request is at work on (its mu held: a part being
// staged, a completion) is not discarded to make room for another: it stays
// open with what its parts hold; once free, it goes as an abort would.
func TestAnUploadARequestIsAtWorkOnIsNotDiscarded(t *testing.T) {
	us := newUploads(t.TempDir(), time.Now, 48<<20, 12<<20)
	u := &upload{id: "mpu_1", identity: "a", akid: "K", dir: filepath.Join(us.dir, "mpu_1"), parts: map[int]*part{}}
	if err := us.add(u); err != nil {
		t.Fatal(err)
	}
	if err := us.reserve(u.identity, 2<<20); err != nil {
		t.Fatal(err)
	}
	us.settle(u, 2<<20, 0)
	u.mu.Lock()
	gone := us.discard(u)
	u.mu.Unlock()
	if gone || us.m[u.id] != u || u.aborted || us.held != 2<<20 || us.ours["a"] != 2<<20 {
		t.Fatalf("an upload at work: discarded %v, open %v, aborted %v, budget holds %d, identity %d",
			gone, us.m[u.id] == u, u.aborted, us.held, us.ours["a"])
	}
	if !us.discard(u) || us.m[u.id] != nil || !u.aborted || us.held != 0 || len(us.ours) != 0 {
		t.Fatalf("the upload once free: open %v, aborted %v, budget holds %d, identities %v", us.m[u.id] != nil, u.aborted, us.held, us.ours)
	}
}
