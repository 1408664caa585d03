package handlers_test

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"testing"
)

// Rule: a fence header given twice is ambiguous (a proxy or a log may read
// the other field) and INVALID_REQUEST, even with equal values, and nothing
// changes: no receipt, no moved fence, no object written.
func TestRepeatedFenceHeaderIsRefusedWithoutStateChange(t *testing.T) {
	e := newEnv(t)
	c := e.grant("local/inv/7", ownerA, 1, nil)
	before := e.snap("local/inv/7", "inv/7")
	for _, name := range []string{"Fence-Grant", "Fence-Status", "Fence-Segment", "Fence-Effect-Key", "Fence-Delegation"} {
		hdr := http.Header{"Fence-Grant": {c.grant}, "Fence-Status": {c.status}, "Fence-Segment": {"1"}}
		switch name {
		case "Fence-Segment":
			hdr[name] = []string{"1", "2"}
		case "Fence-Effect-Key", "Fence-Delegation":
			hdr[name] = []string{"k", "k"}
		default:
			hdr[name] = append(hdr[name], hdr[name][0]) // the same value twice
		}
		wantProblem(t, e.doHeader("PUT", "/v1/objects/local/inv/7", tokA, hdr, "body"), http.StatusBadRequest, "INVALID_REQUEST")
		if after := e.snap("local/inv/7", "inv/7"); after != before {
			t.Fatalf("%s twice changed the state: %+v -> %+v", name, before, after)
		}
	}
	if r := e.put(tokA, c, "local/inv/7", 1, "body"); r.status != http.StatusOK {
		t.Fatalf("the same write with each header once: %d %s", r.status, r.body)
	}
}

// Rule: every declared SHA-256 of the body is checked, however many header
// lines carry them: a second Content-Digest or x-amz-checksum-sha256 line
// that does not match the body is INVALID_REQUEST and nothing is written.
func TestEveryDeclaredDigestLineIsChecked(t *testing.T) {
	e := newEnv(t)
	c := e.grant("local/inv/7", ownerA, 1, nil)
	right, wrong := sha256.Sum256([]byte("the body")), sha256.Sum256([]byte("another body"))
	b64 := func(s [32]byte) string { return base64.StdEncoding.EncodeToString(s[:]) }
	before := e.snap("local/inv/7", "inv/7")
	for name, lines := range map[string][]string{
		"Content-Digest":        {"sha-512=:AAAA:", "sha-256=:" + b64(wrong) + ":"},
		"x-amz-checksum-sha256": {b64(right), b64(wrong)},
	} {
		hdr := http.Header{"Fence-Grant": {c.grant}, "Fence-Status": {c.status}, "Fence-Segment": {"1"}}
		hdr[http.CanonicalHeaderKey(name)] = lines
		wantProblem(t, e.doHeader("PUT", "/v1/objects/local/inv/7", tokA, hdr, "the body"), http.StatusBadRequest, "INVALID_REQUEST")
		if after := e.snap("local/inv/7", "inv/7"); after != before {
			t.Fatalf("a wrong second %s line changed the state: %+v -> %+v", name, before, after)
		}
	}
}

// Rule: an empty x-amz-checksum-sha256 line declares nothing: the write is
// taken as one without it.
func TestAnEmptyChecksumLineDeclaresNothing(t *testing.T) {
	e := newEnv(t)
	c := e.grant("local/inv/7", ownerA, 1, nil)
	hdr := http.Header{"Fence-Grant": {c.grant}, "Fence-Status": {c.status}, "Fence-Segment": {"1"}, "X-Amz-Checksum-Sha256": {""}}
	if r := e.doHeader("PUT", "/v1/objects/local/inv/7", tokA, hdr, "body"); r.status != http.StatusOK {
		t.Fatalf("a write with an empty checksum line: %d %s", r.status, r.body)
	}
}

// Rule: Content-Type is a singleton field: given on two lines it is
// INVALID_REQUEST and nothing is written (the first line used to be kept,
// where the S3 front door joined them, and a proxy may keep the last).
func TestAContentTypeGivenTwiceIsRefusedWithoutStateChange(t *testing.T) {
	e := newEnv(t)
	c := e.grant("local/inv/7", ownerA, 1, nil)
	before := e.snap("local/inv/7", "inv/7")
	hdr := http.Header{"Fence-Grant": {c.grant}, "Fence-Status": {c.status}, "Fence-Segment": {"1"}, "Content-Type": {"text/plain", "text/html"}}
	wantProblem(t, e.doHeader("PUT", "/v1/objects/local/inv/7", tokA, hdr, "body"), http.StatusBadRequest, "INVALID_REQUEST")
	if after := e.snap("local/inv/7", "inv/7"); after != before {
		t.Fatalf("a Content-Type given twice changed the state: %+v -> %+v", before, after)
	}
}

// Rule: Fence-Segment is a canonical decimal: "01", "+1", " 1" are
// INVALID_REQUEST and nothing changes (strconv read "01" as 1, a number a
// proxy or a log may read otherwise); "1" is then accepted.
func TestANonCanonicalSegmentIsRefusedWithoutStateChange(t *testing.T) {
	e := newEnv(t)
	c := e.grant("local/inv/7", ownerA, 1, nil)
	before := e.snap("local/inv/7", "inv/7")
	for _, seg := range []string{"01", "+1", "1.0", "0"} {
		hdr := http.Header{"Fence-Grant": {c.grant}, "Fence-Status": {c.status}, "Fence-Segment": {seg}}
		wantProblem(t, e.doHeader("PUT", "/v1/objects/local/inv/7", tokA, hdr, "body"), http.StatusBadRequest, "INVALID_REQUEST")
		if after := e.snap("local/inv/7", "inv/7"); after != before {
			t.Fatalf("Fence-Segment %q changed the state: %+v -> %+v", seg, before, after)
		}
	}
	if r := e.put(tokA, c, "local/inv/7", 1, "body"); r.status != http.StatusOK {
		t.Fatalf("the same write with segment 1: %d %s", r.status, r.body)
	}
}
