// Package objecttest is the contract suite every fencegate.ObjectStore backend
// must pass: conditional creates and replaces, conditional deletes (of a
// missing key too), NOT_FOUND for missing keys, metadata and content type
// kept with the object, and exactly one winner among concurrent writers
// chained on the same ETag; for a backend that stages
// (fencegate.ObjectStager), that staging changes nothing until the staged
// put, which keeps Put's contract (stage.go); and for a backend that lists
// (fencegate.ObjectLister), paging in key order without its hidden keys
// (list.go).
package objecttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// Option adjusts the suite to a backend's declared capabilities.
type Option func(*options)

type options struct {
	conditionalDelete bool
	concurrency       int
	hidden            []string // WithHiddenKeys
}

// WithoutConditionalDelete declares that the store cannot delete on an ETag
// condition: the suite then requires Delete to fail with code UNSUPPORTED.
func WithoutConditionalDelete() Option { return func(o *options) { o.conditionalDelete = false } }

// WithConcurrency sets how many writers race in the concurrent If-Match test
// (default 8).
func WithConcurrency(n int) Option { return func(o *options) { o.concurrency = n } }

type subtest struct {
	name string
	fn   func(t *testing.T, s fencegate.ObjectStore)
}

// Run runs the contract suite. open is called once per subtest and must return
// a store that does not share keys with stores returned for other subtests
// (for example a fresh directory or a fresh key prefix).
func Run(t *testing.T, open func(t *testing.T) fencegate.ObjectStore, opts ...Option) {
	o := options{conditionalDelete: true, concurrency: 8}
	for _, f := range opts {
		f(&o)
	}
	tests := []subtest{
		{"IfNoneMatchCreates", testIfNoneMatchCreates},
		{"SecondIfNoneMatchFails", testSecondIfNoneMatchFails},
		{"IfMatchReplacesAndChangesETag", testIfMatchReplaces},
		{"WrongIfMatchLeavesObjectUnchanged", testWrongIfMatch},
		{"IfMatchOnMissingKeyFails", testIfMatchMissing},
		{"PutWithoutExactlyOneConditionIsInvalid", testPutNeedsCondition},
		{"GetAndHeadOfMissingKeyAreNotFound", testMissingNotFound},
		{"MetadataRoundTrips", testMetadata},
		{"NonASCIIMetadataRoundTrips", testNonASCIIMetadata},
		{"ContentTypeRoundTrips", testContentType},
		{"WriteWithinItsLandingDeadlineLands", testLandByAhead},
		{"WritePastItsLandingDeadlineIsRefusedAndChangesNothing", testLandByPassed},
		{"ConcurrentIfMatchWritersExactlyOneWins", func(t *testing.T, s fencegate.ObjectStore) {
			testConcurrentIfMatch(t, s, o.concurrency)
		}},
	}
	if o.conditionalDelete {
		tests = append(tests, subtest{"DeleteWithWrongETagKeepsObject", testDeleteWrongETag},
			subtest{"DeleteWithRightETagRemoves", testDeleteRightETag},
			subtest{"DeleteOfMissingKeyFailsItsConditionOrIsANoOp", testDeleteMissing},
			subtest{"DeletePastItsLandingDeadlineKeepsObject", testDeleteLandByPassed})
	} else {
		tests = append(tests, subtest{"DeleteIsUnsupported", testDeleteUnsupported})
	}
	if _, ok := open(t).(fencegate.ObjectStager); ok {
		tests = append(tests, stagerTests...)
	}
	if _, ok := open(t).(fencegate.ObjectLister); ok {
		tests = append(tests, listTests(o)...)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// Key returns a fresh canonical key for a test.
func Key(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "/" + hex.EncodeToString(b)
}

// Meta returns sample effect metadata for fence token f.
func Meta(f uint64) fencegate.EffectMeta {
	return fencegate.EffectMeta{FenceToken: f, Segment: f * 10, Root: "root-" + hex.EncodeToString([]byte{byte(f)}),
		OperationID: "op-1", PayloadDigest: "sha256:abc", ReceiptID: "rcpt-" + hex.EncodeToString([]byte{byte(f), 7})}
}

// Create puts body under key with If-None-Match and fails the test on error.
func Create(t *testing.T, s fencegate.ObjectStore, key, body string) string {
	t.Helper()
	etag, err := s.Put(context.Background(), fencegate.PutRequest{Key: key, Body: strings.NewReader(body),
		Size: int64(len(body)), ContentType: "text/plain", IfNoneMatch: true, Meta: Meta(1)})
	if err != nil {
		t.Fatalf("create %s: %v", key, err)
	}
	if etag == "" {
		t.Fatalf("create %s returned an empty ETag", key)
	}
	return etag
}

// Replace puts body under key with If-Match etag and returns the new ETag and the error.
func Replace(s fencegate.ObjectStore, key, etag, body string, m fencegate.EffectMeta) (string, error) {
	return s.Put(context.Background(), fencegate.PutRequest{Key: key, Body: strings.NewReader(body),
		Size: int64(len(body)), ContentType: "text/plain", IfMatch: etag, Meta: m})
}

// Content reads key and returns its body and info, failing the test on error.
func Content(t *testing.T, s fencegate.ObjectStore, key string) (string, fencegate.ObjectInfo) {
	t.Helper()
	rc, info, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return string(b), info
}

// RequirePrecondition fails the test unless err's cause is ErrPreconditionFailed.
func RequirePrecondition(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded; want a precondition failure", what)
	}
	if !errors.Is(err, fencegate.ErrPreconditionFailed) {
		t.Fatalf("%s: got %v; want cause ErrPreconditionFailed", what, err)
	}
}

// RequireCode fails the test unless err is an *fencegate.Error with code.
func RequireCode(t *testing.T, err error, code fencegate.Code, what string) {
	t.Helper()
	var fe *fencegate.Error
	if !errors.As(err, &fe) || fe.Code != code {
		t.Fatalf("%s: got %v; want *fencegate.Error with code %s", what, err, code)
	}
}

func testIfNoneMatchCreates(t *testing.T, s fencegate.ObjectStore) {
	key := Key("create")
	etag := Create(t, s, key, "hello")
	body, info := Content(t, s, key)
	if body != "hello" || info.ETag != etag || info.Size != 5 || info.Key != key {
		t.Fatalf("got body %q info %+v; want hello, ETag %s, size 5, key %s", body, info, etag, key)
	}
}

func testSecondIfNoneMatchFails(t *testing.T, s fencegate.ObjectStore) {
	key := Key("create")
	etag := Create(t, s, key, "first")
	_, err := s.Put(context.Background(), fencegate.PutRequest{Key: key, Body: strings.NewReader("second"),
		Size: 6, IfNoneMatch: true, Meta: Meta(2)})
	RequirePrecondition(t, err, "second If-None-Match put")
	if body, info := Content(t, s, key); body != "first" || info.ETag != etag {
		t.Fatalf("object changed to %q (ETag %s) after a refused create", body, info.ETag)
	}
}

func testIfMatchReplaces(t *testing.T, s fencegate.ObjectStore) {
	key := Key("replace")
	etag := Create(t, s, key, "v1")
	etag2, err := Replace(s, key, etag, "v2-longer", Meta(2))
	if err != nil {
		t.Fatalf("If-Match put with the current ETag: %v", err)
	}
	if etag2 == "" || etag2 == etag {
		t.Fatalf("replace returned ETag %q; want a new one (old %q)", etag2, etag)
	}
	body, info := Content(t, s, key)
	if body != "v2-longer" || info.ETag != etag2 || info.Size != 9 {
		t.Fatalf("after replace got %q %+v", body, info)
	}
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); !ok || m != Meta(2) {
		t.Fatalf("after replace metadata %v; want the new effect's", info.Metadata)
	}
	// The old ETag no longer matches.
	_, err = Replace(s, key, etag, "v3", Meta(3))
	RequirePrecondition(t, err, "If-Match with the replaced ETag")
}

func testWrongIfMatch(t *testing.T, s fencegate.ObjectStore) {
	key := Key("wrong")
	etag := Create(t, s, key, "keep me")
	_, err := Replace(s, key, `"00000000000000000000000000000000"`, "overwrite", Meta(9))
	RequirePrecondition(t, err, "If-Match with a wrong ETag")
	body, info := Content(t, s, key)
	if body != "keep me" || info.ETag != etag {
		t.Fatalf("object changed to %q (ETag %s) after a refused write", body, info.ETag)
	}
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); !ok || m != Meta(1) {
		t.Fatalf("metadata changed after a refused write: %v", info.Metadata)
	}
}

func testIfMatchMissing(t *testing.T, s fencegate.ObjectStore) {
	key := Key("missing")
	_, err := Replace(s, key, `"00000000000000000000000000000000"`, "x", Meta(1))
	RequirePrecondition(t, err, "If-Match on a missing key")
	_, err = s.Head(context.Background(), key)
	RequireCode(t, err, fencegate.CodeNotFound, "head after refused If-Match")
}

func testPutNeedsCondition(t *testing.T, s fencegate.ObjectStore) {
	key := Key("uncond")
	_, err := s.Put(context.Background(), fencegate.PutRequest{Key: key, Body: strings.NewReader("x"), Size: 1, Meta: Meta(1)})
	RequireCode(t, err, fencegate.CodeInvalidRequest, "put with no condition")
	_, err = s.Put(context.Background(), fencegate.PutRequest{Key: key, Body: strings.NewReader("x"), Size: 1,
		IfMatch: `"abc"`, IfNoneMatch: true, Meta: Meta(1)})
	RequireCode(t, err, fencegate.CodeInvalidRequest, "put with both conditions")
	_, err = s.Head(context.Background(), key)
	RequireCode(t, err, fencegate.CodeNotFound, "head after invalid puts")
}

func testMissingNotFound(t *testing.T, s fencegate.ObjectStore) {
	key := Key("nothing")
	rc, _, err := s.Get(context.Background(), key)
	if rc != nil {
		rc.Close()
	}
	RequireCode(t, err, fencegate.CodeNotFound, "get of a missing key")
	_, err = s.Head(context.Background(), key)
	RequireCode(t, err, fencegate.CodeNotFound, "head of a missing key")
}

func testMetadata(t *testing.T, s fencegate.ObjectStore) {
	key := Key("meta")
	m := fencegate.EffectMeta{FenceToken: 1<<63 + 5, Segment: 42, Root: "b2f1c0ffee", OperationID: "op-7f3a",
		PayloadDigest: "sha256:" + strings.Repeat("ab", 32), ReceiptID: "r-0123456789"}
	etag, err := s.Put(context.Background(), fencegate.PutRequest{Key: key, Body: strings.NewReader("m"), Size: 1,
		IfNoneMatch: true, Meta: m})
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Head(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	_, ginfo := Content(t, s, key)
	for _, got := range []fencegate.ObjectInfo{info, ginfo} {
		if got.ETag != etag {
			t.Fatalf("ETag %s; want %s", got.ETag, etag)
		}
		pm, ok := fencegate.ParseEffectMeta(got.Metadata)
		if !ok || pm != m {
			t.Fatalf("metadata %v parsed to %+v; want %+v", got.Metadata, pm, m)
		}
		want := m.Map()
		sub := maps.Clone(got.Metadata)
		maps.DeleteFunc(sub, func(k, _ string) bool { _, in := want[k]; return !in })
		if !maps.Equal(sub, want) {
			t.Fatalf("metadata %v; want %v", got.Metadata, want)
		}
	}
}

// testNonASCIIMetadata: an operation ID and root the registry accepts (any
// UTF-8 text without control characters, fencegate's registry) and a
// client's own metadata value that are not ASCII (or are ASCII holding
// "=?") come back as written from Head and Get.
func testNonASCIIMetadata(t *testing.T, s fencegate.ObjectStore) {
	key := Key("meta-utf8")
	m := fencegate.EffectMeta{FenceToken: 3, Segment: 1, Root: "Wurzel-Größe ✓", OperationID: "Bestellung Müller/日本",
		PayloadDigest: "sha256:" + strings.Repeat("cd", 32), ReceiptID: "r-0123456789"}
	user := map[string]string{"Title": "Crème brûlée", "Plain": "ascii only", "Link": "https://x.example/p?a=?b"}
	if _, err := s.Put(context.Background(), fencegate.PutRequest{Key: key, Body: strings.NewReader("m"), Size: 1,
		IfNoneMatch: true, Meta: m, UserMeta: user}); err != nil {
		t.Fatal(err)
	}
	info, err := s.Head(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	_, ginfo := Content(t, s, key)
	for _, got := range []fencegate.ObjectInfo{info, ginfo} {
		if pm, ok := fencegate.ParseEffectMeta(got.Metadata); !ok || pm != m {
			t.Fatalf("metadata %q parsed to %+v; want %+v", got.Metadata, pm, m)
		}
		for k, v := range user {
			if got := lookupFold(got.Metadata, k); got != v {
				t.Fatalf("user metadata %s = %q; want %q (all: %q)", k, got, v, got)
			}
		}
	}
}

// lookupFold is md's value under name, whatever the case of its key (S3
// keeps metadata names in lower case).
func lookupFold(md map[string]string, name string) string {
	for k, v := range md {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

func testContentType(t *testing.T, s fencegate.ObjectStore) {
	key := Key("ctype")
	_, err := s.Put(context.Background(), fencegate.PutRequest{Key: key, Body: bytes.NewReader([]byte("{}")), Size: 2,
		ContentType: "application/json; charset=utf-8", IfNoneMatch: true, Meta: Meta(1)})
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Head(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	_, ginfo := Content(t, s, key)
	for _, ct := range []string{info.ContentType, ginfo.ContentType} {
		if ct != "application/json; charset=utf-8" {
			t.Fatalf("content type %q; want application/json; charset=utf-8", ct)
		}
	}
}

func testConcurrentIfMatch(t *testing.T, s fencegate.ObjectStore, n int) {
	key := Key("race")
	etag := Create(t, s, key, "base")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		others  []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := "writer-" + string(rune('a'+i))
			newTag, err := Replace(s, key, etag, body, Meta(uint64(i+2)))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners = append(winners, body+" "+newTag)
			case !errors.Is(err, fencegate.ErrPreconditionFailed):
				others = append(others, err)
			}
		}()
	}
	wg.Wait()
	if len(others) > 0 {
		t.Fatalf("losers must fail with a precondition failure; got %v", others)
	}
	if len(winners) != 1 {
		t.Fatalf("%d writers won with the same ETag (%v); want exactly one", len(winners), winners)
	}
	body, info := Content(t, s, key)
	if body+" "+info.ETag != winners[0] {
		t.Fatalf("stored %q ETag %s; want the winner %s", body, info.ETag, winners[0])
	}
}

func testDeleteWrongETag(t *testing.T, s fencegate.ObjectStore) {
	key := Key("del")
	etag := Create(t, s, key, "stay")
	err := s.Delete(context.Background(), key, `"00000000000000000000000000000000"`)
	RequirePrecondition(t, err, "delete with a wrong ETag")
	if body, info := Content(t, s, key); body != "stay" || info.ETag != etag {
		t.Fatalf("object changed to %q after a refused delete", body)
	}
}

func testDeleteRightETag(t *testing.T, s fencegate.ObjectStore) {
	key := Key("del")
	etag := Create(t, s, key, "go")
	if err := s.Delete(context.Background(), key, etag); err != nil {
		t.Fatalf("delete with the current ETag: %v", err)
	}
	_, err := s.Head(context.Background(), key)
	RequireCode(t, err, fencegate.CodeNotFound, "head after delete")
	// Deleting it again (a retried delete) either fails its condition or is a
	// no-op (S3 stores differ); it is never another kind of error.
	if err := s.Delete(context.Background(), key, etag); err != nil {
		RequirePrecondition(t, err, "conditional delete of a missing key")
	}
	// The key can be created again.
	Create(t, s, key, "again")
}

// testDeleteMissing: a conditional delete of a key that never existed
// fails its condition (cause ErrPreconditionFailed: what the gateway's
// ObjectDelete reconciles, finding the key absent, to COMMITTED) or is a
// no-op (S3 stores differ); never NOT_FOUND or another error, which the
// gateway would leave UNKNOWN. Nothing is created.
func testDeleteMissing(t *testing.T, s fencegate.ObjectStore) {
	key := Key("del-missing")
	if err := s.Delete(context.Background(), key, `"00000000000000000000000000000000"`); err != nil {
		RequirePrecondition(t, err, "conditional delete of a key that never existed")
	}
	_, err := s.Head(context.Background(), key)
	RequireCode(t, err, fencegate.CodeNotFound, "head after a delete of a missing key")
}

func testDeleteUnsupported(t *testing.T, s fencegate.ObjectStore) {
	key := Key("del")
	etag := Create(t, s, key, "stay")
	RequireCode(t, s.Delete(context.Background(), key, etag), fencegate.CodeUnsupported, "delete on a store without conditional delete")
	if body, _ := Content(t, s, key); body != "stay" {
		t.Fatalf("object changed to %q after an unsupported delete", body)
	}
}

func testLandByAhead(t *testing.T, s fencegate.ObjectStore) {
	key := Key("landby")
	etag := Create(t, s, key, "v1")
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Minute))
	etag2, err := s.Put(ctx, fencegate.PutRequest{Key: key, Body: strings.NewReader("v2"), Size: 2, IfMatch: etag, Meta: Meta(2)})
	if err != nil {
		t.Fatalf("put a minute before its landing deadline: %v", err)
	}
	if body, info := Content(t, s, key); body != "v2" || info.ETag != etag2 {
		t.Fatalf("after the put got %q (ETag %s), want v2 (%s)", body, info.ETag, etag2)
	}
}

// testLandByPassed: a write that reaches the store after its landing
// deadline is refused, is no precondition failure, is marked certainly not
// applied (fencegate.ErrNotApplied), and changes nothing.
func testLandByPassed(t *testing.T, s fencegate.ObjectStore) {
	key := Key("landby")
	etag := Create(t, s, key, "keep me")
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(-time.Second))
	_, err := s.Put(ctx, fencegate.PutRequest{Key: key, Body: strings.NewReader("late"), Size: 4, IfMatch: etag, Meta: Meta(2)})
	if err == nil {
		t.Fatal("a put past its landing deadline was applied")
	}
	if errors.Is(err, fencegate.ErrPreconditionFailed) {
		t.Fatalf("a put past its landing deadline failed as a precondition: %v", err)
	}
	if !errors.Is(err, fencegate.ErrNotApplied) {
		t.Fatalf("a put past its landing deadline is not marked certainly not applied: %v", err)
	}
	if body, info := Content(t, s, key); body != "keep me" || info.ETag != etag {
		t.Fatalf("object changed to %q (ETag %s) after a put past its landing deadline", body, info.ETag)
	}
}

func testDeleteLandByPassed(t *testing.T, s fencegate.ObjectStore) {
	key := Key("landby-del")
	etag := Create(t, s, key, "stay")
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(-time.Second))
	if err := s.Delete(ctx, key, etag); err == nil || errors.Is(err, fencegate.ErrPreconditionFailed) || !errors.Is(err, fencegate.ErrNotApplied) {
		t.Fatalf("delete past its landing deadline: %v; want a refusal, certainly not applied, that is no precondition failure", err)
	}
	if body, info := Content(t, s, key); body != "stay" || info.ETag != etag {
		t.Fatalf("object changed to %q after a delete past its landing deadline", body)
	}
}
