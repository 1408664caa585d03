package local_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
)

// Rule: the store accepts no write whose trailer it could not read back
// (over 1 MiB of JSON: '<' is six bytes there). A Content-Type or user
// metadata past the bounds every backend keeps (PutRequest.Validate) is
// refused by Put and Stage INVALID_REQUEST before anything changes: the
// object keeps its bytes and ETag, a missing key stays missing, and after
// a restart the key is written with the ETag it had.
func TestAWriteWhoseTrailerCannotBeReadBackIsRefusedBeforeAnythingChanges(t *testing.T) {
	ctx := context.Background()
	huge := strings.Repeat("<", 200_000) // 1.2 MB as JSON
	for _, c := range []struct {
		name string
		req  func(key string) fencegate.PutRequest
	}{
		{"content type", func(key string) fencegate.PutRequest {
			return fencegate.PutRequest{Key: key, Body: strings.NewReader("x"), Size: 1, ContentType: huge, Meta: objecttest.Meta(2)}
		}},
		{"user metadata", func(key string) fencegate.PutRequest {
			return fencegate.PutRequest{Key: key, Body: strings.NewReader("x"), Size: 1, Meta: objecttest.Meta(2),
				UserMeta: map[string]string{"a": huge}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openAt(t, dir)
			defer func() { _ = s.Close() }()
			old := objecttest.Create(t, s, "k/old", "v1")
			put := c.req("k/old")
			put.IfMatch = old
			if _, err := s.Put(ctx, put); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
				t.Fatalf("replace with an unreadable trailer: %v, want INVALID_REQUEST", err)
			}
			create := c.req("k/new")
			create.IfNoneMatch = true
			if _, err := s.Put(ctx, create); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
				t.Fatalf("create with an unreadable trailer: %v, want INVALID_REQUEST", err)
			}
			if sp, err := s.Stage(ctx, c.req("k/new")); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
				if sp != nil {
					sp.Discard()
				}
				t.Fatalf("stage with an unreadable trailer: %v, want INVALID_REQUEST", err)
			}
			checkUnchanged(t, s, old)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openAt(t, dir)
			checkUnchanged(t, s, old)
			if _, err := objecttest.Replace(s, "k/old", old, "v2", objecttest.Meta(3)); err != nil {
				t.Fatalf("after a restart, a write of k/old If-Match its ETag: %v", err)
			}
			objecttest.Create(t, s, "k/new", "n1")
		})
	}
}

// checkUnchanged asserts that k/old holds "v1" under etag and k/new is missing.
func checkUnchanged(t *testing.T, s *local.Store, etag string) {
	t.Helper()
	ctx := context.Background()
	rc, info, err := s.Get(ctx, "k/old")
	if err != nil {
		t.Fatalf("k/old after the refused writes: %v", err)
	}
	b, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || string(b) != "v1" || info.ETag != etag || info.ContentType != "text/plain" {
		t.Fatalf("k/old after the refused writes: %q %+v %v, want v1 under %s", b, info, err, etag)
	}
	if _, err := s.Head(ctx, "k/new"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("k/new after its refused create: %v, want NOT_FOUND", err)
	}
	if infos, _, err := s.List(ctx, "k/", "", -1); err != nil || len(infos) != 1 {
		t.Fatalf("listing after the refused writes: %+v %v, want k/old alone", infos, err)
	}
}

// Rule: a write at every bound PutRequest.Validate sets (the longest key,
// a Content-Type of fencegate.MaxContentType bytes and user metadata of
// fencegate.MaxUserMetaSize, all of characters JSON writes six bytes for
// where it can) has a trailer the reader takes: it is written and read back.
func TestAWriteAtEveryBoundIsWrittenAndReadBack(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	defer func() { _ = s.Close() }()
	key := "k/" + strings.Repeat("k", fencegate.MaxNameLength-2)
	ct := strings.Repeat("<", fencegate.MaxContentType)
	user := map[string]string{"a": strings.Repeat("<", fencegate.MaxUserMetaSize-1)}
	if _, err := s.Put(ctx, fencegate.PutRequest{Key: key, Body: strings.NewReader("x"), Size: 1, ContentType: ct,
		IfNoneMatch: true, Meta: objecttest.Meta(1), UserMeta: user}); err != nil {
		t.Fatal(err)
	}
	info, err := s.Head(ctx, key)
	if err != nil || info.ContentType != ct || info.Metadata["a"] != user["a"] {
		t.Fatalf("Head of a write at every bound: %v (content type kept: %v, metadata kept: %v)", err, info.ContentType == ct, info.Metadata["a"] == user["a"])
	}
}
