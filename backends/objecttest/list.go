package objecttest

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/fencegate/fencegate"
)

// WithHiddenKeys declares keys the store keeps for itself (an S3 store's
// start-up probe scratch keys, left behind by an interrupted probe) that
// its List must never show: the list test writes each with Put and
// requires that no listing includes it.
func WithHiddenKeys(keys ...string) Option {
	return func(o *options) { o.hidden = append(o.hidden, keys...) }
}

// listTests are run for a store that lists (fencegate.ObjectLister).
func listTests(o options) []subtest {
	return []subtest{
		{"ListShowsKeysInOrderWithTheirETagsAndSizes", func(t *testing.T, s fencegate.ObjectStore) {
			testListAll(t, s, o.hidden)
		}},
		{"ListPagesWithLimitAndAfter", func(t *testing.T, s fencegate.ObjectStore) {
			testListPages(t, s, o.hidden)
		}},
	}
}

// listed is a listing's keys, ETags and sizes, as "key etag size" lines.
type listed []string

func lines(infos []fencegate.ObjectInfo) listed {
	out := listed{}
	for _, i := range infos {
		out = append(out, i.Key+" "+i.ETag+" "+strconv.FormatInt(i.Size, 10))
	}
	return out
}

// listFixture writes the listed keys (and the hidden ones) into s and
// returns the lines a full listing must show, in key order. Each subtest's
// store shares no keys with another's, so these are all it holds.
func listFixture(t *testing.T, s fencegate.ObjectStore, hidden []string) listed {
	t.Helper()
	var want listed
	for _, key := range []string{"list/b", "list/a", "list/d/e", "list/c", "lis", "other/x"} {
		body := "body of " + key
		want = append(want, key+" "+Create(t, s, key, body)+" "+strconv.Itoa(len(body)))
	}
	for _, key := range hidden {
		Create(t, s, key, "scratch")
	}
	slices.Sort(want) // "key etag size": no key is a prefix of another, so lines sort as keys
	return want
}

// testListAll: a listing of the whole store shows every object once, in
// ascending byte order of keys, with the ETag and size its write answered,
// and none of the store's hidden keys; a prefix narrows it.
func testListAll(t *testing.T, s fencegate.ObjectStore, hidden []string) {
	l := s.(fencegate.ObjectLister)
	want := listFixture(t, s, hidden)
	infos, more, err := l.List(context.Background(), "", "", 100)
	if err != nil || more || !slices.Equal(lines(infos), want) {
		t.Fatalf("List(\"\", \"\", 100) = %q, more %v, %v; want %q, no more (hidden keys %q never listed)", lines(infos), more, err, want, hidden)
	}
	infos, more, err = l.List(context.Background(), "list/", "", 100)
	if err != nil || more || !slices.Equal(lines(infos), want[1:5]) {
		t.Fatalf("List(\"list/\", \"\", 100) = %q, more %v, %v; want %q", lines(infos), more, err, want[1:5])
	}
}

// testListPages: listing page by page (limit, then after = the last key
// shown) visits every object once in key order, no page holds more than
// limit, and more is true exactly when objects are left to list; after
// need not be a key.
func testListPages(t *testing.T, s fencegate.ObjectStore, hidden []string) {
	l := s.(fencegate.ObjectLister)
	want := listFixture(t, s, hidden)
	for limit := 1; limit <= len(want)+1; limit++ {
		var got listed
		after := ""
		for page := 0; ; page++ {
			infos, more, err := l.List(context.Background(), "", after, limit)
			if err != nil || len(infos) > limit || page > len(want) {
				t.Fatalf("limit %d, after %q: %q, %v; want at most %d objects", limit, after, lines(infos), err, limit)
			}
			got = append(got, lines(infos)...)
			if rest := len(want) - len(got); more != (rest > 0) || (more && len(infos) == 0) {
				t.Fatalf("limit %d, after %q: %q, more %v with %d objects still to list", limit, after, lines(infos), more, rest)
			}
			if !more {
				break
			}
			after = infos[len(infos)-1].Key
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pages of %d: %q; want %q", limit, got, want)
		}
	}
	infos, _, err := l.List(context.Background(), "list/", "list/b0", 100)
	if err != nil || !slices.Equal(lines(infos), want[3:5]) {
		t.Fatalf("List(\"list/\", \"list/b0\", 100) = %q, %v; want %q (after needs not be a key)", lines(infos), err, want[3:5])
	}
}
