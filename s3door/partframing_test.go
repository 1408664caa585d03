package s3door_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/s3door"
)

// partState is what an upload has staged and what the staging budget holds:
// the upload's parts as ListParts lists them, the budget's bytes in all and
// for the owner, and the files in the front door's spool.
type partState struct {
	parts     string
	all, mine int64
	files     int
}

// partStateOf reads u's partState through srv and u's client.
func partStateOf(t *testing.T, e *env, srv *s3door.Server, u *mpu) partState {
	t.Helper()
	if err := srv.StagingInStep(); err != nil {
		t.Fatal(err)
	}
	lp, err := u.c.ListParts(context.Background(), &s3.ListPartsInput{Bucket: aws.String("b"), Key: aws.String(u.key), UploadId: u.id})
	if err != nil {
		t.Fatal(err)
	}
	var parts strings.Builder
	for _, p := range lp.Parts {
		fmt.Fprintf(&parts, "%d %s %d;", aws.ToInt32(p.PartNumber), aws.ToString(p.ETag), aws.ToInt64(p.Size))
	}
	all, mine := srv.StagingHeld(owner)
	return partState{parts: parts.String(), all: all, mine: mine, files: e.filesUnder("")}
}

// sendPart sends part n of u as akid with the payload hash payloadHash, the
// headers hdr and body; chunkedTE sends the body with no Content-Length
// (Transfer-Encoding: chunked). It answers the status and the body.
func sendPart(t *testing.T, e *env, akid string, u *mpu, n int, payloadHash string, hdr map[string]string, body string, chunkedTE bool) (int, string) {
	t.Helper()
	path := fmt.Sprintf("/b/%s?partNumber=%d&uploadId=%s", u.key, n, *u.id)
	signedBody := body
	if chunkedTE {
		signedBody = "" // no content-length signed: the body is set below
	}
	req, _ := e.signed(t, akid, path, payloadHash, hdr, signedBody, time.Now())
	if chunkedTE {
		req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), -1
	}
	return do(t, req)
}

// Rule: an UploadPart whose body's framing (framingOf) is malformed is
// refused as S3 refuses it — an aws-chunked part with no usable
// x-amz-decoded-content-length, or a plain one with no Content-Length, 411
// MissingContentLength; a streaming form the door does not implement 501
// NotImplemented; an unknown x-amz-content-sha256 400 InvalidArgument; a
// decoded body shorter than it declared 400 IncompleteBody — and the
// refusal stages nothing: the upload's parts, whether the part's number was
// staged before or not, the staging budget's bytes and the spool's files
// are as before, and a well-formed part sent after is staged.
func TestAMalformedPartIsRefusedAndStagesNothing(t *testing.T) {
	var srv *s3door.Server
	e := newEnvServer(t, nil, false, nil, func(s *s3door.Server) { srv = s })
	u := begin(t, e.client(e.lease("AKIDA", owner, "b/r")), "r/k")
	u.mustPart(1, 3<<20, 'a') // part 1 staged before; part 2 not
	const (
		unsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
		signedChunks    = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
		signedTrailer   = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	)
	chunkedBody := "5\r\nhello\r\n0\r\n\r\n"
	chunked := func(decoded string) map[string]string {
		h := map[string]string{"Content-Encoding": "aws-chunked"}
		if decoded != "" {
			h["X-Amz-Decoded-Content-Length"] = decoded
		}
		return h
	}
	for _, c := range []struct {
		name        string
		payloadHash string
		hdr         map[string]string
		body        string
		chunkedTE   bool
		status      int
		code        string
	}{
		{"unsigned-trailer chunks, decoded length abc", unsignedTrailer, chunked("abc"), chunkedBody, false, 411, "MissingContentLength"},
		{"unsigned-trailer chunks, decoded length -1", unsignedTrailer, chunked("-1"), chunkedBody, false, 411, "MissingContentLength"},
		{"unsigned-trailer chunks, no decoded length", unsignedTrailer, chunked(""), chunkedBody, false, 411, "MissingContentLength"},
		{"unsigned-trailer chunks, decoded length abc, no Content-Length", unsignedTrailer, chunked("abc"), chunkedBody, true, 411, "MissingContentLength"},
		{"signed chunks, decoded length abc", signedChunks, chunked("abc"), chunkedBody, false, 411, "MissingContentLength"},
		{"signed chunks, decoded length -1", signedChunks, chunked("-1"), chunkedBody, false, 411, "MissingContentLength"},
		{"signed chunks, no decoded length", signedChunks, chunked(""), chunkedBody, false, 411, "MissingContentLength"},
		{"signed trailer, decoded length 5", signedTrailer, chunked("5"), chunkedBody, false, 501, "NotImplemented"},
		{"signed trailer, no decoded length", signedTrailer, chunked(""), chunkedBody, false, 501, "NotImplemented"},
		{"STREAMING-FOO", "STREAMING-FOO", chunked("5"), chunkedBody, false, 400, "InvalidArgument"},
		{"unsigned payload, no Content-Length", "UNSIGNED-PAYLOAD", nil, "hello", true, 411, "MissingContentLength"},
		{"decoded length 5, 1 byte sent", unsignedTrailer, chunked("5"), "1\r\nx\r\n0\r\n\r\n", false, 400, "IncompleteBody"},
		{"decoded length 5, 1 byte sent, no Content-Length", unsignedTrailer, chunked("5"), "1\r\nx\r\n0\r\n\r\n", true, 400, "IncompleteBody"},
	} {
		for _, n := range []int{1, 2} { // the number staged before, and one not
			before := partStateOf(t, e, srv, u)
			status, out := sendPart(t, e, "AKIDA", u, n, c.payloadHash, c.hdr, c.body, c.chunkedTE)
			if status != c.status || !strings.Contains(out, "<Code>"+c.code+"</Code>") {
				t.Errorf("%s as part %d: %d %s, want %d %s", c.name, n, status, out, c.status, c.code)
			}
			if after := partStateOf(t, e, srv, u); after != before {
				t.Errorf("%s as part %d changed what is staged: %+v, before %+v", c.name, n, after, before)
			}
		}
	}
	before := partStateOf(t, e, srv, u)
	if status, out := sendPart(t, e, "AKIDA", u, 2, unsignedTrailer, chunked("5"), chunkedBody, false); status != http.StatusOK {
		t.Fatalf("a well-formed aws-chunked part 2 after the refusals: %d %s", status, out)
	}
	after := partStateOf(t, e, srv, u)
	if !strings.HasPrefix(after.parts, before.parts) || !strings.HasSuffix(after.parts, " 5;") || !strings.HasPrefix(after.parts[len(before.parts):], "2 ") {
		t.Fatalf("parts after a well-formed part 2: %q, before %q", after.parts, before.parts)
	}
	if after.all != before.all+s3door.MinPartCharge || after.mine != before.mine+s3door.MinPartCharge {
		t.Fatalf("the budget holds %d (%d the owner's) after a 5-byte part, %d (%d) before: want one MinPartCharge more",
			after.all, after.mine, before.all, before.mine)
	}
}
