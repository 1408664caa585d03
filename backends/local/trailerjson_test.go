package local

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestTrailerJSONIsWhatJSONMarshalWrites: the hand-written encoder writes
// exactly json.Marshal's bytes, for keys, ETags and metadata with every
// byte value, invalid UTF-8, HTML characters and line separators, with and
// without a time written: files stay what every version writes and reads.
func TestTrailerJSONIsWhatJSONMarshalWrites(t *testing.T) {
	var all strings.Builder
	for c := range 256 {
		all.WriteByte(byte(c))
	}
	odd := []string{"", "plain/key", all.String(), "a\u2028b\u2029c", "<&>\"\\", "\xff\xfe", "é日本\U0001F600", "\x00\x1f\x7f"}
	times := []time.Time{{}, time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC), time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("x", 3600))}
	for i, s := range odd {
		for j, at := range times {
			md := map[string]string{s: odd[(i+1)%len(odd)], "fencegate-segment": "12", "b": s, "a": ""}
			if j == 1 {
				md = nil
			}
			if j == 2 {
				md = map[string]string{}
			}
			tr := trailer{Key: s, ETag: odd[(i+3)%len(odd)], Size: int64(i * 1000), ContentType: odd[(i+5)%len(odd)], Metadata: md, Modified: at}
			want, err := json.Marshal(tr)
			if err != nil {
				t.Fatal(err)
			}
			got, err := appendTrailerJSON([]byte("prefix"), tr)
			if err != nil || !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("trailer %d/%d:\n got %q (%v)\nwant %q", i, j, got, err, want)
			}
		}
	}
	// A time JSON cannot carry fails as json.Marshal fails.
	if _, err := appendTrailerJSON(nil, trailer{Modified: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Fatal("year 10000 encoded")
	}
}
