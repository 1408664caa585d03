package handlers_test

import (
	"net/http"
	"testing"
)

// TestQueryKeyFormIsRefusedLikeThePathForm: the ?key= form of an object route
// (for generated clients, which escape slashes in path parameters) decodes
// the key once and keeps every canonical-mapping refusal of the path form;
// each refusal leaves fence state, receipts and the object unchanged.
func TestQueryKeyFormIsRefusedLikeThePathForm(t *testing.T) {
	e := newEnv(t)
	a := accepted(t, e)
	hdr := map[string]string{"Fence-Grant": a.grant, "Fence-Status": a.status, "Fence-Segment": "2"}
	cases := []struct {
		name, path string
		status     int
		code       string
	}{
		{"DotDotTraversal", "/v1/objects/local?key=inv/7/../8", 400, "INVALID_REQUEST"},
		{"EncodedDotDot", "/v1/objects/local?key=inv/7/%2E%2E/8", 400, "INVALID_REQUEST"},
		{"DotSegment", "/v1/objects/local?key=inv/./7", 400, "INVALID_REQUEST"},
		{"EmptySegment", "/v1/objects/local?key=inv//7", 400, "INVALID_REQUEST"},
		{"LeadingSlash", "/v1/objects/local?key=/inv/7", 400, "INVALID_REQUEST"},
		{"TrailingSlash", "/v1/objects/local?key=inv/7/", 400, "INVALID_REQUEST"},
		{"Backslash", "/v1/objects/local?key=inv%5C7", 400, "INVALID_REQUEST"},
		{"DoubleEncodedSlashIsNotDecodedTwice", "/v1/objects/local?key=inv%252F7", 400, "INVALID_REQUEST"},
		{"ControlCharacter", "/v1/objects/local?key=inv/7%00", 400, "INVALID_REQUEST"},
		{"NonNFCName", "/v1/objects/local?key=inv/7/e%CC%81", 400, "INVALID_REQUEST"},
		{"EmptyKey", "/v1/objects/local?key=", 400, "INVALID_REQUEST"},
		{"NoKeyAtAll", "/v1/objects/local", 400, "INVALID_REQUEST"},
		{"KeyTwice", "/v1/objects/local?key=inv/7&key=inv/8", 400, "INVALID_REQUEST"},
		{"KeyInPathAndQuery", "/v1/objects/local/inv/7?key=inv/8", 400, "INVALID_REQUEST"},
		{"MalformedQuery", "/v1/objects/local?key=inv/%zz", 400, "INVALID_REQUEST"},
		{"SiblingPrefixIsNotCovered", "/v1/objects/local?key=inv/70", 403, "RESOURCE_MISMATCH"},
		{"CaseTrickIsNotCovered", "/v1/objects/local?key=INV/7", 403, "RESOURCE_MISMATCH"},
		{"KeyCannotLeaveItsStore", "/v1/objects/local?key=../local/inv/7", 400, "INVALID_REQUEST"},
		{"UnknownStore", "/v1/objects/nowhere?key=inv/7", 404, "NOT_FOUND"},
		// These routes take no other parameter: one a caller meant is not
		// silently dropped from the write (path form and query form alike).
		{"UnknownParameterOnThePathForm", "/v1/objects/local/inv/7?segment=3", 400, "INVALID_REQUEST"},
		{"UnknownParameterBesideTheKey", "/v1/objects/local?key=inv/7&versionId=1", 400, "INVALID_REQUEST"},
		{"EmptyParameterName", "/v1/objects/local/inv/7?=x", 400, "INVALID_REQUEST"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, method := range []string{"PUT", "DELETE"} {
				before := e.snap(res7, "inv/7")
				wantProblem(t, e.do(method, c.path, tokA, hdr, "forged"), c.status, c.code)
				if after := e.snap(res7, "inv/7"); after != before {
					t.Fatalf("%s: state changed:\nbefore %+v\nafter  %+v", method, before, after)
				}
			}
			if c.status == 400 {
				wantProblem(t, e.do("GET", c.path, tokA, nil, ""), 400, "INVALID_REQUEST")
			}
		})
	}
}

// TestQueryKeyNamesTheSameObjectAsThePath: PUT ?key=inv/7/part-1 is the write
// of key inv/7/part-1 (resource local/inv/7/part-1 is under the grant), so
// the same segment sent again in the path form is its replay, and reads and
// deletes of either form see the same object.
func TestQueryKeyNamesTheSameObjectAsThePath(t *testing.T) {
	e := newEnv(t)
	a := accepted(t, e)
	hdr := map[string]string{"Fence-Grant": a.grant, "Fence-Status": a.status, "Fence-Segment": "2"}
	w := e.do("PUT", "/v1/objects/local?key=inv%2F7%2Fpart-1", tokA, hdr, "part")
	if w.status != 200 || w.json["target"] != "objects/local/inv/7/part-1" || w.json["resource"] != res7 {
		t.Fatalf("query-form PUT: %d %s", w.status, w.body)
	}
	if r := e.do("PUT", "/v1/objects/local/inv/7/part-1", tokA, hdr, "part"); r.status != 200 || r.header.Get("Fence-Replay") != "true" ||
		r.json["receiptId"] != w.json["receiptId"] {
		t.Fatalf("path-form replay: %d %v %s", r.status, r.header, r.body)
	}
	if r := e.do("GET", "/v1/objects/local/inv/7/part-1", tokA, nil, ""); r.status != 200 || r.body != "part" {
		t.Fatalf("path-form read: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/v1/objects/local?key=inv/7/part-1", tokA, nil, ""); r.status != 200 || r.body != "part" || r.header.Get("Fence-Segment") != "2" {
		t.Fatalf("query-form read: %d %s", r.status, r.body)
	}
	if r := e.do("HEAD", "/v1/objects/local?key=inv/7/part-1", tokA, nil, ""); r.status != 200 || r.header.Get("Fence-Token") != "5" {
		t.Fatalf("query-form head: %d %v", r.status, r.header)
	}
	hdr["Fence-Segment"] = "3"
	if r := e.do("DELETE", "/v1/objects/local?key=inv/7/part-1", tokA, hdr, ""); r.status != 200 || r.json["state"] != "COMMITTED" {
		t.Fatalf("query-form delete: %d %s", r.status, r.body)
	}
	wantProblem(t, e.do("GET", "/v1/objects/local/inv/7/part-1", tokA, nil, ""), http.StatusNotFound, "NOT_FOUND")
}

// TestResourceReadDecodesAnEscapedNameOnce: GET /v1/resources/{resource} (a
// read) takes the name's slashes escaped, as a generated client sends them,
// decoding the path once; a double-encoded slash stays "%2F" and is refused.
func TestResourceReadDecodesAnEscapedNameOnce(t *testing.T) {
	e := newEnv(t)
	accepted(t, e)
	plain := e.do("GET", "/v1/resources/local/inv/7", tokA, nil, "")
	escaped := e.do("GET", "/v1/resources/local%2Finv%2F7", tokA, nil, "")
	if plain.status != 200 || escaped.status != 200 || escaped.body != plain.body {
		t.Fatalf("plain %d %s, escaped %d %s", plain.status, plain.body, escaped.status, escaped.body)
	}
	wantProblem(t, e.do("GET", "/v1/resources/local%252Finv%252F7", tokA, nil, ""), 400, "INVALID_REQUEST")
	wantProblem(t, e.do("GET", "/v1/resources/local%2Finv%2F..%2F7", tokA, nil, ""), 400, "INVALID_REQUEST")
}
