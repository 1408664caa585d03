package handlers_test

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
)

// digestCase is a body, the Content-Digest lines sent with it, and whether
// the write is to be accepted.
type digestCase struct {
	name  string
	lines []string
	body  string
}

// sha256Of is the Byte Sequence of the SHA-256 of body, as :base64:.
func sha256Of(body string) string {
	sum := sha256.Sum256([]byte(body))
	return ":" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
}

// putWithDigest writes body to local/dig/<i> (a resource of its own) with
// the Content-Digest lines, snapshotting the state before the write.
func putWithDigest(e *env, i int, lines []string, body string) (reply, snapshot, string, string) {
	e.t.Helper()
	res, key := "local/dig/"+strconv.Itoa(i), "dig/"+strconv.Itoa(i)
	c := e.grant(res, ownerA, 1, nil)
	before := e.snap(res, key)
	hdr := http.Header{"Fence-Grant": {c.grant}, "Fence-Status": {c.status}, "Fence-Segment": {"1"}, "Content-Digest": lines}
	return e.doHeader("PUT", "/v1/objects/"+res, tokA, hdr, body), before, res, key
}

// wantRefusedUnchanged runs each case and wants INVALID_REQUEST and no state
// change (no receipt, no fence, no object, no Put forwarded).
func wantRefusedUnchanged(t *testing.T, cases []digestCase) {
	t.Helper()
	e := newEnv(t)
	for i, c := range cases {
		r, before, res, key := putWithDigest(e, i, c.lines, c.body)
		if r.status != http.StatusBadRequest || r.code() != "INVALID_REQUEST" {
			t.Errorf("%s (Content-Digest %q): want 400 INVALID_REQUEST, got %d %s", c.name, c.lines, r.status, r.body)
			continue
		}
		if after := e.snap(res, key); after != before {
			t.Errorf("%s: the refused write changed the state: %+v -> %+v", c.name, before, after)
		}
	}
}

// Rule: a Content-Digest that does not parse as a structured-field
// Dictionary (RFC 9530 section 2, RFC 8941 section 3.2) is INVALID_REQUEST
// and nothing is written, whatever digest it seems to carry: a field the
// gateway cannot read is never taken as declaring nothing.
func TestContentDigestThatIsNotADictionaryIsRefused(t *testing.T) {
	right, wrong := sha256Of("the body"), sha256Of("another body")
	wantRefusedUnchanged(t, []digestCase{
		{"spaces around = and a wrong digest", []string{"sha-256 = " + wrong}, "the body"},
		{"spaces around = and the right digest", []string{"sha-256 = " + right}, "the body"},
		{"a trailing comma", []string{"sha-256=" + right + ","}, "the body"},
		{"an upper-case key", []string{"SHA-256=" + right}, "the body"},
		{"base64 without the colons", []string{"sha-256=" + right[1:len(right)-1]}, "the body"},
		{"the second line does not parse", []string{"sha-256=" + right, "sha-512 = :AAAA:"}, "the body"},
	})
}

// Rule: a sha-256 member whose value is not a Byte Sequence (:base64:) is
// INVALID_REQUEST and nothing is written (RFC 9530 section 2: the value is a
// Byte Sequence).
func TestContentDigestSha256ThatIsNotAByteSequenceIsRefused(t *testing.T) {
	right := sha256Of("the body")
	wantRefusedUnchanged(t, []digestCase{
		{"a bare key (Boolean true)", []string{"sha-256"}, "the body"},
		{"a bare key with parameters", []string{"sha-256;x=1"}, "the body"},
		{"a String", []string{`sha-256="` + right[1:len(right)-1] + `"`}, "the body"},
		{"an Inner List", []string{"sha-256=(" + right + ")"}, "the body"},
		{"an Integer", []string{"sha-256=1"}, "the body"},
	})
}

// Rule: every sha-256 member must match the body, however many there are and
// however many lines carry them: a repeated key, which RFC 8941 section
// 4.2.2 would resolve to its last value, does not hide an earlier one that
// does not match, and nothing is written.
func TestEverySha256MemberOfContentDigestIsChecked(t *testing.T) {
	right, wrong := sha256Of("the body"), sha256Of("another body")
	wantRefusedUnchanged(t, []digestCase{
		{"a wrong digest", []string{"sha-256=" + wrong}, "the body"},
		{"a wrong digest with parameters", []string{"sha-256=" + wrong + ";x=1"}, "the body"},
		{"wrong then right on one line", []string{"sha-256=" + wrong + ", sha-256=" + right}, "the body"},
		{"right then wrong on one line", []string{"sha-256=" + right + ", sha-256=" + wrong}, "the body"},
		{"wrong then right on two lines", []string{"sha-256=" + wrong, "sha-256=" + right}, "the body"},
		{"an empty Byte Sequence", []string{"sha-256=::"}, "the body"},
		// A Display String (RFC 9651 section 3.3.8) takes a backslash
		// literally: the members after it are members, not its text.
		{"a Display String ending in a backslash, then wrong and right", []string{`sha-256=%"a\", sha-256=` + wrong + `, sha-256=` + right}, "the body"},
		{"a sha-256 Display String ending in a backslash, then right", []string{`sha-256=%"x\", sha-256=` + right}, "the body"},
	})
}

// Rule: a Content-Digest that is a valid Dictionary and whose every sha-256
// member matches the body is accepted and the body written: parameters on
// the member are ignored (RFC 8941 section 3.2 allows them), members of other
// algorithms are ignored (RFC 9530 section 2: "A recipient MAY ignore any or
// all digests"), a comma inside a String is not a member separator, lines
// combine into one Dictionary (RFC 8941 section 4.2) and an empty line
// declares nothing.
func TestContentDigestWithParametersAndOtherMembersIsAccepted(t *testing.T) {
	right, wrong := sha256Of("the body"), sha256Of("another body")
	e := newEnv(t)
	for i, c := range []digestCase{
		{"parameters", []string{"sha-256=" + right + ";x=1"}, "the body"},
		{"parameters on a bare-token member and other algorithms", []string{"sha-512=:AAAA:;q=1, md5=" + wrong + ", sha-256=" + right + ";a=?0;b=tok"}, "the body"},
		{"a String holding a comma and a wrong digest", []string{`note="x, sha-256=` + wrong + `\" ,", sha-256=` + right}, "the body"},
		{"a Display String holding a comma and a wrong digest", []string{`note=%"x, sha-256=` + wrong + `", sha-256=` + right}, "the body"},
		{"the same digest twice on two lines", []string{"sha-256=" + right, "unixsum=7, sha-256=" + right}, "the body"},
		{"an empty line", []string{"", "sha-256=" + right}, "the body"},
		{"no sha-256 member", []string{"sha-512=" + wrong}, "the body"},
	} {
		r, _, _, key := putWithDigest(e, i, c.lines, c.body)
		if r.status != http.StatusOK {
			t.Errorf("%s (Content-Digest %q): %d %s", c.name, c.lines, r.status, r.body)
			continue
		}
		if got := e.snap("local/"+key, key).object; got != c.body {
			t.Errorf("%s: object %q, want %q", c.name, got, c.body)
		}
	}
}
