package s3door_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/s3door"
)

// Each workload identity's share of the staging budget
// (Server.StagingBytesPerIdentity): what its open uploads' staged parts and
// its parts being read hold, over all its leases.

const other = "spiffe://test/other"

// shareEnv is a front door whose staging holds at most 48 MiB, 12 MiB of
// it for one identity; srv is its Server, for the accounting.
func shareEnv(t *testing.T, now func() time.Time) (e *env, srv *s3door.Server) {
	e = newEnvServer(t, nil, false, now, func(s *s3door.Server) {
		s.StagingBytes, s.StagingBytesPerIdentity = 48<<20, 12<<20
		srv = s
	})
	return e, srv
}

// refusedShare checks that err is the refusal of identity's part past its
// share, holding held of it.
func refusedShare(t *testing.T, err error, what, identity string, held int64) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s was accepted beyond its identity's share", what)
	}
	code, msg, status := apiCode(t, err)
	if code != "SlowDown" || status != http.StatusServiceUnavailable || !strings.HasPrefix(msg, "RESOURCE_BUSY: ") ||
		!strings.Contains(msg, "s3StagingBytesPerIdentity") || !strings.Contains(msg, strconv.Quote(identity)) ||
		!strings.Contains(msg, "holds "+strconv.FormatInt(held, 10)+" bytes") || !strings.Contains(msg, "its share is "+strconv.Itoa(12<<20)) {
		t.Fatalf("%s: %d %s %q, want 503 SlowDown RESOURCE_BUSY naming s3StagingBytesPerIdentity, %q, its %d held and its share", what, status, code, msg, identity, held)
	}
}

// inStep checks that every identity's count is what its uploads hold and
// that they add up to the budget's, and that identity holds mine of all.
func inStep(t *testing.T, srv *s3door.Server, identity string, all, mine int64) {
	t.Helper()
	if err := srv.StagingInStep(); err != nil {
		t.Fatal(err)
	}
	if a, m := srv.StagingHeld(identity); a != all || m != mine {
		t.Fatalf("staging holds %d in all and %d for %s, want %d and %d", a, m, identity, all, mine)
	}
}

// Rule: an identity whose uploads (over all its leases) hold its share of
// the staging budget is refused a further part (503 SlowDown,
// RESOURCE_BUSY) while another identity, with the budget far from spent,
// still stages its own.
func TestAnIdentityPastItsStagingShareIsRefusedWhileAnotherStillStages(t *testing.T) {
	e, srv := shareEnv(t, nil)
	a1 := begin(t, e.client(e.lease("AKIDA1", owner, "b/r"), noRetry), "r/a1")
	a2 := begin(t, e.client(e.lease("AKIDA2", owner, "b/r"), noRetry), "r/a2") // the same identity, another lease
	b := begin(t, e.client(e.lease("AKIDB", other, "b/o"), noRetry), "o/b")
	a1.mustPart(1, 8<<20, 'a')
	_, err := a2.part(1, 5<<20, 'a') // 8 + 5 MiB > 12 MiB, far below 48 MiB
	refusedShare(t, err, "a part past the identity's share", owner, 8<<20)
	b.mustPart(1, 8<<20, 'b')
	b.mustPart(2, 4<<20, 'b') // exactly the other identity's share
	inStep(t, srv, owner, 20<<20, 8<<20)
	_, err = b.part(3, 1, 'b') // a part of one byte still counts MinPartCharge
	refusedShare(t, err, "a 1-byte part with the share spent", other, 12<<20)
	a2.mustPart(1, 4<<20, 'a') // exactly the rest of the first identity's share
	inStep(t, srv, other, 24<<20, 12<<20)
}

// Rule: a part refused for its identity's share changes nothing: what the
// budget and the identity hold, the upload's parts (the part of its number
// staged before is still listed, with its ETag and size) and the spool's
// files are as they were.
func TestAPartPastItsIdentitysShareIsRefusedAndChangesNothing(t *testing.T) {
	e, srv := shareEnv(t, nil)
	u := begin(t, e.client(e.lease("AKIDA", owner, "b/r"), noRetry), "r/k")
	first := u.mustPart(1, 8<<20, 'a')
	all, mine := srv.StagingHeld(owner)
	files := e.filesUnder("")
	for _, p := range []struct {
		n    int32
		size int
	}{{2, 5 << 20}, {1, 5 << 20}} { // a new part, and part 1 again (read beside the old one: 8 + 5 MiB)
		_, err := u.part(p.n, p.size, 'b')
		refusedShare(t, err, "part "+strconv.Itoa(int(p.n))+" past the share", owner, 8<<20)
		if a, m := srv.StagingHeld(owner); a != all || m != mine {
			t.Fatalf("after the refusal staging holds %d in all and %d for the identity, %d and %d before", a, m, all, mine)
		}
		if got := e.filesUnder(""); got != files {
			t.Fatalf("the refused part left files: %d, %d before", got, files)
		}
		lp, err := u.c.ListParts(context.Background(), &s3.ListPartsInput{Bucket: aws.String("b"), Key: aws.String(u.key), UploadId: u.id})
		if err != nil || len(lp.Parts) != 1 || aws.ToString(lp.Parts[0].ETag) != aws.ToString(first.ETag) || aws.ToInt64(lp.Parts[0].Size) != 8<<20 {
			t.Fatalf("the upload's parts after the refusal: %+v %v", lp, err)
		}
	}
	inStep(t, srv, owner, 8<<20, 8<<20)
}

// Rule: an identity's share is given back, exactly, when a part number is
// sent again (the new part replaces the old: counted once), when a part is
// refused once read, and when its upload is aborted, completed or forgotten
// idle; once its uploads are gone the identity holds nothing.
func TestAnIdentitysShareIsGivenBackByReplacedPartsAbortCompleteAndIdle(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e, srv := shareEnv(t, clock)
	ctx := context.Background()
	c := e.client(e.lease("AKIDA", owner, "b/r"), noRetry)
	bk := aws.String("b")

	a := begin(t, c, "r/a")
	a.mustPart(1, 6<<20, 'a')
	a.mustPart(1, 6<<20, 'a') // sent again: 6 MiB held, not 12
	inStep(t, srv, owner, 6<<20, 6<<20)
	a.mustPart(1, 2<<20, 'a') // sent again smaller: the old part's 6 MiB went back
	inStep(t, srv, owner, 2<<20, 2<<20)
	_, err := a.c.UploadPart(ctx, &s3.UploadPartInput{Bucket: bk, Key: aws.String(a.key), UploadId: a.id, PartNumber: aws.Int32(2),
		Body: strings.NewReader("read, then refused"), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
	if code, _, _ := apiCode(t, err); code != "InvalidRequest" { // the upload was created without a checksum
		t.Fatalf("a part of another checksum algorithm: %s", code)
	}
	inStep(t, srv, owner, 2<<20, 2<<20) // a part refused once read gives its reservation back
	a.mustPart(2, 10<<20, 'a')
	_, err = begin(t, c, "r/x").part(1, 1, 'x')
	refusedShare(t, err, "a part with the share spent", owner, 12<<20)
	if _, err := c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: bk, Key: aws.String(a.key), UploadId: a.id}); err != nil {
		t.Fatal(err)
	}
	inStep(t, srv, owner, 0, 0) // abort

	b := begin(t, c, "r/b")
	p := b.mustPart(1, 12<<20, 'b')
	inStep(t, srv, owner, 12<<20, 12<<20)
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: bk, Key: aws.String(b.key), UploadId: b.id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: p.ETag}}}}); err != nil {
		t.Fatal(err)
	}
	inStep(t, srv, owner, 0, 0) // completion

	d := begin(t, c, "r/d")
	d.mustPart(1, 12<<20, 'd')
	inStep(t, srv, owner, 12<<20, 12<<20)
	mu.Lock()
	now = now.Add(s3door.UploadIdle + time.Minute)
	mu.Unlock()
	e.kit.Set(now)
	e.lease("AKIDC", owner, "b/r") // a lease with a proof fresh at the new time
	// A CreateMultipartUpload sweeps the idle upload.
	code, out := e.sendAt(t, "AKIDC", "POST", "/b/r/g?uploads", nil, "", now)
	if code != http.StatusOK {
		t.Fatalf("an upload after the others went idle: %d %s", code, out)
	}
	inStep(t, srv, owner, 0, 0) // idle sweep
	id := out[strings.Index(out, "<UploadId>")+len("<UploadId>") : strings.Index(out, "</UploadId>")]
	if code, out := e.sendAt(t, "AKIDC", "PUT", "/b/r/g?partNumber=1&uploadId="+id, nil, strings.Repeat("g", 12<<20), now); code != http.StatusOK {
		t.Fatalf("the whole share once d went idle: %d %s", code, out)
	}
	inStep(t, srv, owner, 12<<20, 12<<20)
}
