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
