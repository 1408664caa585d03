package s3_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencegate/fencegate"
	fs3 "github.com/fencegate/fencegate/backends/s3"
)

// uploadsServer is an S3 look-alike (path-style) for multipart uploads of
// one key, keeping what AWS documents for a conditional
// CompleteMultipartUpload: a completion answered 409
// ConditionalRequestConflict ends that upload ("re-initiate the multipart
// upload with CreateMultipartUpload and re-upload each part",
// API_CompleteMultipartUpload), so the same completion sent again meets 404
// NoSuchUpload, as does any request naming an aborted or completed upload.
// conflict(n) says whether the n-th completion (from 1) meets a conflict.
type uploadsServer struct {
	conflict func(n int) bool
	onAnswer func(n int) // called before the n-th completion is answered, if set
	lost     bool        // every completion meets NoSuchUpload (its upload completed unanswered)

	mu          sync.Mutex
	created     int
	live        map[string]bool // upload IDs neither completed nor aborted
	aborted     []string
	completions []string // upload ID of each completion
}

func (u *uploadsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	defer u.mu.Unlock()
	q := r.URL.Query()
	id := q.Get("uploadId")
	_, initiate := q["uploads"]
	switch {
	case r.Method == http.MethodPost && initiate:
		u.created++
		id = strconv.Itoa(u.created)
		u.live[id] = true
		fmt.Fprintf(w, `<InitiateMultipartUploadResult><UploadId>%s</UploadId></InitiateMultipartUploadResult>`, id)
	case r.Method == http.MethodDelete: // an abort ends the upload whatever its state
		delete(u.live, id)
		u.aborted = append(u.aborted, id)
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPost:
		u.completions = append(u.completions, id)
		n := len(u.completions)
		if f := u.onAnswer; f != nil {
			f(n)
		}
		if !u.live[id] || u.lost {
			s3Error(w, http.StatusNotFound, "NoSuchUpload")
			return
		}
		delete(u.live, id)
		if u.conflict(n) {
			s3Error(w, http.StatusConflict, "ConditionalRequestConflict")
			return
		}
		fmt.Fprintf(w, `<CompleteMultipartUploadResult><ETag>"done-%s"</ETag></CompleteMultipartUploadResult>`, id)
	}
}

// bigPut is a store on u whose objects above 1 MiB go multipart (in one
// part), whose SDK sends each request once, and the put of such an object.
func bigPut(t *testing.T, ctx context.Context, u *uploadsServer) (string, error) {
	u.live = map[string]bool{}
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("AK", "SK", ""), RetryMaxAttempts: 1})
	st := fs3.New("s3x", c, "bucket", "", fs3.WithSinglePutLimit(1<<20))
	const n = 1<<20 + 1
	return st.Put(ctx, fencegate.PutRequest{Key: "big", Body: &gen{n: n}, Size: n, IfNoneMatch: true})
}

// Rule: a CompleteMultipartUpload answered 409 ConditionalRequestConflict
// is not sent again with the same upload ID (it would meet NoSuchUpload);
// as AWS's CompleteMultipartUpload reference says, the upload is started
// afresh with CreateMultipartUpload and its parts uploaded again, and the
// conflicting upload is aborted. The write then lands.
func TestCompletionConflictReinitiatesTheUpload(t *testing.T) {
	eachPath(t, func(t *testing.T, ctx context.Context) {
		u := &uploadsServer{conflict: func(n int) bool { return n == 1 }}
		etag, err := bigPut(t, ctx, u)
		if err != nil || etag != `"done-2"` {
			t.Fatalf("put whose first completion met a conflict: %q, %v; want the second upload's ETag", etag, err)
		}
		if u.created != 2 || fmt.Sprint(u.completions) != "[1 2]" || fmt.Sprint(u.aborted) != "[1]" {
			t.Fatalf("%d uploads created, completions %v, aborted %v; want 2, [1 2], [1]", u.created, u.completions, u.aborted)
		}
	})
}

// Rule: re-initiations after completion conflicts are bounded as PutObject's
// conflict retries are (one try and 4 more); a conflict that outlasts them is
// no definite answer (uncertain), never NOT_FOUND; every upload is aborted.
func TestPersistentCompletionConflictIsBoundedAndUncertain(t *testing.T) {
	u := &uploadsServer{conflict: func(int) bool { return true }}
	_, err := bigPut(t, context.Background(), u)
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || !fs3.IsUncertain(err) || errors.Is(err, fencegate.ErrNotApplied) {
		t.Fatalf("persistent completion conflict: %v; want BACKEND_UNAVAILABLE, uncertain", err)
	}
	if u.created != 5 || len(u.completions) != 5 || len(u.aborted) != 5 {
		t.Fatalf("%d uploads, %d completions, %d aborted; want 5 of each", u.created, len(u.completions), len(u.aborted))
	}
}

// Rule: no fresh upload is started after a completion conflict once the
// write's context has ended; the conflict is answered as no definite answer.
func TestCompletionConflictAfterCancelStartsNoUpload(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u := &uploadsServer{conflict: func(int) bool { return true }, onAnswer: func(int) { cancel() }}
	_, err := bigPut(t, ctx, u)
	if !fs3.IsUncertain(err) || fencegate.ErrorCode(err) == fencegate.CodeNotFound {
		t.Fatalf("completion conflict, then cancelled: %v; want uncertain", err)
	}
	if u.created != 1 || fmt.Sprint(u.aborted) != "[1]" {
		t.Fatalf("%d uploads created, aborted %v; want 1, [1]", u.created, u.aborted)
	}
}

// Rule: a 404 answered to a write is no missing object: NoSuchUpload to a
// CompleteMultipartUpload (met by a completion sent again after its first
// attempt completed the upload unanswered) is no definite answer, not
// NOT_FOUND.
func TestNoSuchUploadOnCompletionIsUncertainNotNotFound(t *testing.T) {
	u := &uploadsServer{conflict: func(int) bool { return false }, lost: true}
	_, err := bigPut(t, context.Background(), u)
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || !fs3.IsUncertain(err) {
		t.Fatalf("completion answered NoSuchUpload: %v; want BACKEND_UNAVAILABLE, uncertain", err)
	}
}
