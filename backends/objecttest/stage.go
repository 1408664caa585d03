package objecttest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// stagerTests is the contract of fencegate.ObjectStager, run by Run for a
// store that has the capability: staging changes no object; the staged
// put then keeps Put's whole contract (condition, atomicity, metadata,
// landing deadline); a discarded one changes nothing.
var stagerTests = []subtest{
	{"StagedWriteChangesNothingUntilItsPut", testStagedInvisible},
	{"StagedPutWithAFailedConditionChangesNothing", testStagedWrongIfMatch},
	{"StagedPutCreatesOnlyUnderIfNoneMatch", testStagedCreate},
	{"DiscardedStagingChangesNothing", testStagedDiscard},
	{"StagedPutWithoutExactlyOneConditionIsInvalidAndChangesNothing", testStagedNeedsCondition},
	{"StagedPutPastItsLandingDeadlineIsRefusedAndChangesNothing", testStagedLandByPassed},
	{"StagedPutIsUsedOnce", testStagedOnce},
	{"ConcurrentStagedPutsOnOneETagExactlyOneWins", testStagedConcurrent},
	{"StagingABodyOfTheWrongSizeIsInvalid", testStageBadSize},
}

// Stage stages body for key with meta m on s (a fencegate.ObjectStager),
// failing t on an error.
func Stage(t *testing.T, s fencegate.ObjectStore, key, body string, m fencegate.EffectMeta) fencegate.StagedPut {
	t.Helper()
	sp, err := s.(fencegate.ObjectStager).Stage(context.Background(), fencegate.PutRequest{Key: key,
		Body: strings.NewReader(body), Size: int64(len(body)), ContentType: "text/staged", Meta: m})
	if err != nil {
		t.Fatalf("stage %s: %v", key, err)
	}
	return sp
}

// requireUnchanged fails unless key still holds body at etag with meta m.
func requireUnchanged(t *testing.T, s fencegate.ObjectStore, key, body, etag string, m fencegate.EffectMeta, after string) {
	t.Helper()
	got, info := Content(t, s, key)
	if got != body || info.ETag != etag {
		t.Fatalf("after %s the object is %q (ETag %s); want %q (%s)", after, got, info.ETag, body, etag)
	}
	if pm, ok := fencegate.ParseEffectMeta(info.Metadata); !ok || pm != m {
		t.Fatalf("after %s the metadata is %v; want the first write's", after, info.Metadata)
	}
}

func testStagedInvisible(t *testing.T, s fencegate.ObjectStore) {
	key := Key("stage")
	etag := Create(t, s, key, "v1")
	sp := Stage(t, s, key, "v2-staged", Meta(2))
	requireUnchanged(t, s, key, "v1", etag, Meta(1), "staging")
	if info, err := s.Head(context.Background(), key); err != nil || info.ETag != etag {
		t.Fatalf("Head after staging: %+v %v; want ETag %s", info, err, etag)
	}
	etag2, err := sp.Put(context.Background(), etag, false)
	if err != nil {
		t.Fatalf("staged put on the current ETag: %v", err)
	}
	body, info := Content(t, s, key)
	if body != "v2-staged" || info.ETag != etag2 || etag2 == etag || info.ContentType != "text/staged" {
		t.Fatalf("after the staged put got %q %+v; want v2-staged, ETag %s, text/staged", body, info, etag2)
	}
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); !ok || m != Meta(2) {
		t.Fatalf("after the staged put the metadata is %v; want the staged write's", info.Metadata)
	}
}

func testStagedWrongIfMatch(t *testing.T, s fencegate.ObjectStore) {
	key := Key("stage")
	etag := Create(t, s, key, "keep me")
	sp := Stage(t, s, key, "overwrite", Meta(2))
	_, err := sp.Put(context.Background(), `"00000000000000000000000000000000"`, false)
	RequirePrecondition(t, err, "staged put with a wrong ETag")
	requireUnchanged(t, s, key, "keep me", etag, Meta(1), "a refused staged put")
}

func testStagedCreate(t *testing.T, s fencegate.ObjectStore) {
	key := Key("stage")
	sp := Stage(t, s, key, "first", Meta(1))
	if _, err := s.Head(context.Background(), key); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("Head of a key only staged: %v; want NOT_FOUND", err)
	}
	etag, err := sp.Put(context.Background(), "", true)
	if err != nil {
		t.Fatalf("staged create: %v", err)
	}
	sp2 := Stage(t, s, key, "second", Meta(2))
	_, err = sp2.Put(context.Background(), "", true)
	RequirePrecondition(t, err, "a second staged create")
	requireUnchanged(t, s, key, "first", etag, Meta(1), "a refused staged create")
}

func testStagedDiscard(t *testing.T, s fencegate.ObjectStore) {
	key := Key("stage")
	etag := Create(t, s, key, "v1")
	sp := Stage(t, s, key, "discarded", Meta(2))
	sp.Discard()
	sp.Discard() // a second Discard does nothing
	requireUnchanged(t, s, key, "v1", etag, Meta(1), "a discard")
	if _, err := sp.Put(context.Background(), etag, false); fencegate.ErrorCode(err) != fencegate.CodeInternal {
		t.Fatalf("Put after Discard: %v; want INTERNAL", err)
	}
	requireUnchanged(t, s, key, "v1", etag, Meta(1), "a Put after Discard")
	if _, err := Replace(s, key, etag, "v3", Meta(3)); err != nil {
		t.Fatalf("a plain put after a discarded staging: %v", err)
	}
}

func testStagedNeedsCondition(t *testing.T, s fencegate.ObjectStore) {
	key := Key("stage")
	etag := Create(t, s, key, "v1")
	sp := Stage(t, s, key, "no condition", Meta(2))
	_, err := sp.Put(context.Background(), "", false)
	RequireCode(t, err, fencegate.CodeInvalidRequest, "staged put without a condition")
	sp2 := Stage(t, s, key, "two conditions", Meta(2))
	_, err = sp2.Put(context.Background(), etag, true)
	RequireCode(t, err, fencegate.CodeInvalidRequest, "staged put with both conditions")
	requireUnchanged(t, s, key, "v1", etag, Meta(1), "invalid staged puts")
}

func testStagedLandByPassed(t *testing.T, s fencegate.ObjectStore) {
	key := Key("stage")
	etag := Create(t, s, key, "keep me")
	sp := Stage(t, s, key, "late", Meta(2))
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(-time.Second))
	_, err := sp.Put(ctx, etag, false)
	if err == nil || !errors.Is(err, fencegate.ErrNotApplied) {
		t.Fatalf("staged put past its landing deadline: %v; want a refusal certainly not applied", err)
	}
	requireUnchanged(t, s, key, "keep me", etag, Meta(1), "a staged put past its landing deadline")
}

func testStagedOnce(t *testing.T, s fencegate.ObjectStore) {
	key := Key("stage")
	etag := Create(t, s, key, "v1")
	sp := Stage(t, s, key, "v2", Meta(2))
	etag2, err := sp.Put(context.Background(), etag, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sp.Put(context.Background(), etag2, false)
	RequireCode(t, err, fencegate.CodeInternal, "a second Put of one staging")
	sp.Discard() // after Put: does nothing
	requireUnchanged(t, s, key, "v2", etag2, Meta(2), "a second Put and a Discard")
}

func testStagedConcurrent(t *testing.T, s fencegate.ObjectStore) {
	key := Key("stage")
	etag := Create(t, s, key, "v0")
	const n = 6
	staged := make([]fencegate.StagedPut, n)
	for i := range staged {
		staged[i] = Stage(t, s, key, "writer-"+string(rune('a'+i)), Meta(uint64(i+2)))
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins []string
	)
	for i, sp := range staged {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e, err := sp.Put(context.Background(), etag, false); err == nil {
				mu.Lock()
				wins = append(wins, "writer-"+string(rune('a'+i))+" "+e)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("%d staged puts on one ETag won: %v; want exactly one", len(wins), wins)
	}
	body, info := Content(t, s, key)
	if got := body + " " + info.ETag; got != wins[0] {
		t.Fatalf("the object is %q; want the winner's %q", got, wins[0])
	}
}

func testStageBadSize(t *testing.T, s fencegate.ObjectStore) {
	key := Key("stage")
	etag := Create(t, s, key, "v1")
	_, err := s.(fencegate.ObjectStager).Stage(context.Background(), fencegate.PutRequest{Key: key,
		Body: strings.NewReader("four"), Size: 9, Meta: Meta(2)})
	RequireCode(t, err, fencegate.CodeInvalidRequest, "staging 4 bytes declared as 9")
	_, err = s.(fencegate.ObjectStager).Stage(context.Background(), fencegate.PutRequest{Key: "../escape",
		Body: strings.NewReader("x"), Size: 1, Meta: Meta(2)})
	RequireCode(t, err, fencegate.CodeInvalidRequest, "staging under a bad key")
	requireUnchanged(t, s, key, "v1", etag, Meta(1), "refused stagings")
}
