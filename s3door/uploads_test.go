package s3door

import (
	"fmt"
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

// opened registers n open uploads of credential akid of identity in us, as
// add would (no bound checked, nothing staged).
func opened(us *uploads, identity, akid string, n int) {
	for i := range n {
		id := fmt.Sprintf("mpu_%s_%d", akid, i)
		us.m[id] = &upload{id: id, identity: identity, akid: akid, touched: us.now(), parts: map[int]*part{}}
	}
}

// Rule: at the process's bound of open uploads (no identity at its own),
// the leases of other identities are read, and the uploads of one read
// ended make room.
func TestAtTheProcessBoundOtherIdentitiesEndedUploadsGiveWay(t *testing.T) {
	us := newUploads(t.TempDir(), time.Now, 48<<20, 12<<20)
	for i := range MaxOpenUploadsTotal / MaxOpenUploads {
		opened(us, fmt.Sprintf("id%d", i%8), fmt.Sprintf("K%02d", i), MaxOpenUploads)
	}
	u := &upload{identity: "asker", akid: "ASKER"}
	read := us.toRead(u)
	if fmt.Sprint(read) != "[K00 K01 K02 K03 K04 K05 K06 K07 K08 K09 K10 K11 K12 K13 K14 K15]" {
		t.Fatalf("leases read: %v, want the other identities' 16", read)
	}
	us.saw("K03", leaseSeen{ended: true})
	us.unclaim(read)
	if got := us.ofEnded(u); len(got) != MaxOpenUploads || got[0].akid != "K03" {
		t.Fatalf("uploads that give way: %d, want K03's %d", len(got), MaxOpenUploads)
	}
}

// Rule: at its identity's bound (the process's not met), only the asker's
// identity's other leases are read, and another identity's uploads stay
// even when its lease is known ended.
func TestAtAnIdentitysBoundOnlyItsOwnEndedUploadsGiveWay(t *testing.T) {
	us := newUploads(t.TempDir(), time.Now, 48<<20, 12<<20)
	for i := range MaxOpenUploadsPerIdentity / MaxOpenUploads {
		opened(us, "mine", fmt.Sprintf("M%d", i), MaxOpenUploads)
	}
	opened(us, "other", "O", 1)
	us.saw("O", leaseSeen{ended: true}) // known ended
	u := &upload{identity: "mine", akid: "NEW"}
	read := us.toRead(u)
	if fmt.Sprint(read) != "[M0 M1 M2 M3]" {
		t.Fatalf("leases read: %v, want the identity's own", read)
	}
	us.saw("M1", leaseSeen{ended: true})
	us.unclaim(read)
	for _, o := range us.ofEnded(u) {
		if o.akid != "M1" {
			t.Fatalf("an upload of %s (identity %s) gives way, want only M1's", o.akid, o.identity)
		}
	}
	if got := len(us.ofEnded(u)); got != MaxOpenUploads {
		t.Fatalf("uploads that give way: %d, want M1's %d", got, MaxOpenUploads)
	}
}

// Rule: a credential at its own bound of open uploads reads no lease and
// no upload gives way for it, even where other leases are known ended.
func TestACredentialAtItsOwnBoundReadsNothing(t *testing.T) {
	us := newUploads(t.TempDir(), time.Now, 48<<20, 12<<20)
	opened(us, "mine", "ME", MaxOpenUploads)
	for i := range MaxOpenUploadsPerIdentity/MaxOpenUploads - 1 {
		opened(us, "mine", fmt.Sprintf("M%d", i), MaxOpenUploads)
	}
	us.saw("M0", leaseSeen{ended: true})
	u := &upload{identity: "mine", akid: "ME"}
	if read := us.toRead(u); len(read) != 0 {
		t.Fatalf("leases read for a credential at its own bound: %v, want none", read)
	}
	if got := us.ofEnded(u); len(got) != 0 {
		t.Fatalf("uploads that give way for a credential at its own bound: %d, want none", len(got))
	}
}
