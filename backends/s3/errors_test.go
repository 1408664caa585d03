package s3_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencegate/fencegate"
	fs3 "github.com/fencegate/fencegate/backends/s3"
)

// answering returns a store whose server answers every request with h; the
// SDK does not retry, so each Put is one request unless the store retries.
func answering(t *testing.T, h http.HandlerFunc) *fs3.Store {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("AK", "SK", ""), RetryMaxAttempts: 1})
	return fs3.New("s3x", c, "bucket", "")
}

func s3Error(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>m</Message></Error>`))
}

func put(ctx context.Context, s *fs3.Store, ifMatch string) error {
	_, err := s.Put(ctx, fencegate.PutRequest{Key: "k", Body: strings.NewReader("x"), Size: 1,
		IfMatch: ifMatch, IfNoneMatch: ifMatch == ""})
	return err
}

// eachPath runs test for a write without a landing deadline (the SDK's
// PutObject) and one with (as the gateway sends every write: one presigned
// request built by the store, directput.go): both must classify answers alike.
func eachPath(t *testing.T, test func(t *testing.T, ctx context.Context)) {
	t.Run("sdk", func(t *testing.T) { test(t, context.Background()) })
	t.Run("presigned", func(t *testing.T) {
		test(t, fencegate.WithLandBy(context.Background(), time.Now().Add(time.Hour)))
	})
}

func TestPreconditionFailedIsCertainAndCarriesTheCause(t *testing.T) {
	eachPath(t, func(t *testing.T, ctx context.Context) {
		s := answering(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, 412, "PreconditionFailed") })
		err := put(ctx, s, "")
		if !errors.Is(err, fencegate.ErrPreconditionFailed) || fs3.IsUncertain(err) {
			t.Fatalf("412: %v (uncertain %v); want a certain precondition failure", err, fs3.IsUncertain(err))
		}
	})
}

func TestIfMatchOnMissingKeyAnsweredNoSuchKeyIsPreconditionFailure(t *testing.T) {
	eachPath(t, func(t *testing.T, ctx context.Context) {
		s := answering(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, 404, "NoSuchKey") })
		if err := put(ctx, s, `"abc"`); !errors.Is(err, fencegate.ErrPreconditionFailed) {
			t.Fatalf("404 NoSuchKey on If-Match put: %v; want a precondition failure", err)
		}
	})
}

func TestMissingBucketIsNotReportedAsMissingObject(t *testing.T) {
	s := answering(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, 404, "NoSuchBucket") })
	_, _, err := s.Get(context.Background(), "k")
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("NoSuchBucket: %v; want BACKEND_UNAVAILABLE", err)
	}
}

func TestServerErrorAfterSendingIsUncertain(t *testing.T) {
	eachPath(t, func(t *testing.T, ctx context.Context) {
		s := answering(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, 500, "InternalError") })
		err := put(ctx, s, "")
		if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || !fs3.IsUncertain(err) {
			t.Fatalf("500: %v; want BACKEND_UNAVAILABLE and uncertain", err)
		}
	})
}

func TestDroppedConnectionIsUncertain(t *testing.T) {
	eachPath(t, func(t *testing.T, ctx context.Context) {
		s := answering(t, func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		})
		err := put(ctx, s, `"abc"`)
		if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || !fs3.IsUncertain(err) {
			t.Fatalf("dropped connection: %v; want BACKEND_UNAVAILABLE and uncertain", err)
		}
	})
}

func TestRefusalIsCertain(t *testing.T) {
	eachPath(t, func(t *testing.T, ctx context.Context) {
		s := answering(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, 403, "AccessDenied") })
		err := put(ctx, s, "")
		if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || fs3.IsUncertain(err) {
			t.Fatalf("403: %v; want BACKEND_UNAVAILABLE, certain", err)
		}
	})
}

func TestConditionalRequestConflictIsRetried(t *testing.T) {
	eachPath(t, func(t *testing.T, ctx context.Context) {
		var calls atomic.Int32
		s := answering(t, func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) <= 2 {
				s3Error(w, 409, "ConditionalRequestConflict")
				return
			}
			w.Header().Set("ETag", `"new"`)
		})
		if err := put(ctx, s, `"old"`); err != nil || calls.Load() != 3 {
			t.Fatalf("put after two 409s: %v after %d calls; want success on the third", err, calls.Load())
		}
	})
}

// TestPersistentConflictIsNoDefiniteAnswer: a 409 ConditionalRequestConflict
// that outlasts the retries says a conditional write to the key is in
// progress, perhaps this write's own earlier attempt: the put's outcome is
// uncertain (the reconciler decides), not a failed precondition.
func TestPersistentConflictIsNoDefiniteAnswer(t *testing.T) {
	eachPath(t, func(t *testing.T, ctx context.Context) {
		s := answering(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, 409, "ConditionalRequestConflict") })
		err := put(ctx, s, `"old"`)
		if errors.Is(err, fencegate.ErrPreconditionFailed) || !fs3.IsUncertain(err) || errors.Is(err, fencegate.ErrNotApplied) {
			t.Fatalf("persistent 409: %v; want an uncertain outcome", err)
		}
	})
}

// TestRefusalOfTheOnlyAttemptProvesNotApplied: a 4xx other than a failed
// condition, answered to the one request sent, proves the write was not
// applied (fencegate.ErrNotApplied); a 5xx or a lost answer never does.
func TestRefusalOfTheOnlyAttemptProvesNotApplied(t *testing.T) {
	eachPath(t, func(t *testing.T, ctx context.Context) {
		s := answering(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, 403, "AccessDenied") })
		if err := put(ctx, s, ""); !errors.Is(err, fencegate.ErrNotApplied) || fs3.IsUncertain(err) {
			t.Fatalf("403 on the only attempt: %v; want certain, not applied", err)
		}
		s = answering(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, 500, "InternalError") })
		if err := put(ctx, s, ""); errors.Is(err, fencegate.ErrNotApplied) {
			t.Fatalf("500 taken for not applied: %v", err)
		}
		s = answering(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, 412, "PreconditionFailed") })
		if err := put(ctx, s, ""); errors.Is(err, fencegate.ErrNotApplied) {
			t.Fatalf("412 taken for not applied (it must be reconciled): %v", err)
		}
	})
}

// TestRefusalAfterARetryProvesNothing: a 4xx answered to an SDK retry of a
// request whose first attempt had no definite answer (a 500) says nothing
// about that first attempt: not ErrNotApplied.
func TestRefusalAfterARetryProvesNothing(t *testing.T) {
	eachPath(t, func(t *testing.T, ctx context.Context) {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				s3Error(w, 500, "InternalError")
				return
			}
			s3Error(w, 403, "AccessDenied")
		}))
		t.Cleanup(srv.Close)
		c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider("AK", "SK", ""), RetryMaxAttempts: 3})
		s := fs3.New("s3x", c, "bucket", "")
		err := put(ctx, s, "")
		if n.Load() != 2 || errors.Is(err, fencegate.ErrNotApplied) {
			t.Fatalf("500 then 403 (%d requests): %v; want no proof of not applied", n.Load(), err)
		}
	})
}

// Rule: NOT_FOUND answers reads only. A 404 answered to a write, other than
// NoSuchKey to an If-Match (the failed condition), says nothing of the
// object: BACKEND_UNAVAILABLE, never NOT_FOUND.
func TestNotFoundAnsweredToAWriteIsNotNotFound(t *testing.T) {
	eachPath(t, func(t *testing.T, ctx context.Context) {
		for _, code := range []string{"NoSuchKey", "NoSuchUpload", ""} {
			s := answering(t, func(w http.ResponseWriter, r *http.Request) { s3Error(w, 404, code) })
			if err := put(ctx, s, ""); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
				t.Errorf("404 %q to an If-None-Match put: %v; want BACKEND_UNAVAILABLE", code, err)
			}
		}
	})
}
