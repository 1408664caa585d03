package registry_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/s3cred"
)

func testDeriver(t *testing.T) *s3cred.Deriver {
	t.Helper()
	d, err := s3cred.NewDeriver([]byte(strings.Repeat("s", s3cred.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestS3ResolutionFollowsTheLeaseAndALeaseFromBeforeAStateLossIsRevoked(t *testing.T) {
	b := newSwappable(t)
	e := newLossEnv(t, b, &highWater{}, &memory{})
	ctx := context.Background()
	a := e.mustAcquire("alice", "db/a", "r1")
	keys, err := e.r.S3Credentials(a)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.r.ResolveS3(ctx, a.Lease.ID)
	if err != nil || res.State != fencegate.StateHeld || res.Secret != keys.SecretAccessKey || res.Grant == "" || res.StatusProof == "" {
		t.Fatalf("resolution of a held lease: %+v, %v", res, err)
	}
	if lease, _ := s3cred.LeaseOf(keys.AccessKeyID); lease != a.Lease.ID {
		t.Fatalf("access key %s names %q, not the lease %s", keys.AccessKeyID, lease, a.Lease.ID)
	}
	snap := b.snapshot()
	if _, err := e.r.Release(ctx, "alice", a.Lease.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := e.r.ResolveS3(ctx, a.Lease.ID); err != nil || res.State != fencegate.StateReleased {
		t.Fatalf("resolution after release: %+v, %v", res, err)
	}
	e.mustAcquire("carol", "db/a", "c1")
	b.restore(snap) // the backend rolled back: A's lease reads HELD there again, C's is gone
	e.wantPaused("dave", "db/b", "d1")
	if res, err := e.r.ResolveS3(ctx, a.Lease.ID); err != nil || res.State != fencegate.StateRevoked {
		t.Fatalf("resolution of a lease from before the loss: %+v, %v; want REVOKED", res, err)
	}
	if _, err := e.r.ResolveS3(ctx, "lease-unknown"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("unknown lease: %v, want NOT_FOUND", err)
	}
}

func TestRegistryWithoutACredentialKeyIssuesNoS3Credentials(t *testing.T) {
	r, _ := newRegistry(t)
	if r.IssuesS3() {
		t.Fatal("a registry without a key says it issues S3 credentials")
	}
	is, err := r.Acquire(context.Background(), "alice", params("db/x", "r1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.S3Credentials(is); fencegate.ErrorCode(err) != fencegate.CodeUnsupported {
		t.Fatalf("S3Credentials: %v, want UNSUPPORTED", err)
	}
	if _, err := r.ResolveS3(context.Background(), is.Lease.ID); fencegate.ErrorCode(err) != fencegate.CodeUnsupported {
		t.Fatalf("ResolveS3: %v, want UNSUPPORTED", err)
	}
}

// Rule: a lease's S3 resolution reads REVOKED only until the lease's expiry
// has passed, then EXPIRED, while grants are paused after a state loss and
// after they resume; a lease from before the loss is renewed no more, so its
// expiry does not move. The S3 front door relies on it (s3door's leaseGone):
// it keeps the uploads of a lease read REVOKED, which a paused registry
// reads every lease, and discards those of a lease read EXPIRED.
func TestS3ResolutionOfARevokedLeaseReadsExpiredOnceItsExpiryPassed(t *testing.T) {
	b := newSwappable(t)
	e := newLossEnv(t, b, &highWater{}, &memory{})
	ctx := context.Background()
	short := e.mustAcquire("alice", "db/a", "a1") // params' TTL, 30 s
	p := params("db/l", "l1")
	p.TTL = 10 * time.Minute
	long, err := e.r.Acquire(ctx, "bob", p)
	if err != nil {
		t.Fatal(err)
	}
	snap := b.snapshot()
	e.mustAcquire("carol", "db/c", "c1")
	b.restore(snap)
	e.wantPaused("dave", "db/d", "d1")
	// endsAtExpiry: is, whose owner is, is renewed no more, and reads
	// REVOKED until its expiry, then EXPIRED.
	endsAtExpiry := func(phase, owner string, is registry.Issued) {
		t.Helper()
		if _, err := e.r.Renew(ctx, owner, is.Lease.ID, time.Hour); err == nil {
			t.Fatalf("%s: a lease from before the loss was renewed", phase)
		}
		for _, c := range []struct {
			advance time.Duration
			want    fencegate.StatusState
		}{
			{is.Lease.ExpiresAt.Sub(e.clock.Now()) - time.Millisecond, fencegate.StateRevoked},
			{time.Millisecond, fencegate.StateExpired},
		} {
			e.clock.Advance(c.advance)
			res, err := e.r.ResolveS3(ctx, is.Lease.ID)
			if err != nil || res.State != c.want {
				t.Fatalf("%s, %s before its expiry: %s, %v; want %s", phase, is.Lease.ExpiresAt.Sub(e.clock.Now()), res.State, err, c.want)
			}
		}
	}
	endsAtExpiry("paused", "alice", short)
	e.resumeAbove(0, "erin", "db/e", "e1", long.Lease.ID)
	endsAtExpiry("resumed", "bob", long)
}
