package s3door

import (
	"crypto/md5" //nolint:gosec // S3's part ETags are MD5s
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/spool"
)

// CompleteMultipartUpload (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CompleteMultipartUpload.html):
// the parts a client names are checked against those staged, joined and
// written as one fenced effect (multipart.go); the completed upload is
// remembered with the parts list that completed it, so that a retried
// Complete naming the same parts is answered as a replay and one naming
// others is refused.

type completeRequest struct {
	Parts []struct {
		PartNumber int    `xml:"PartNumber"`
		ETag       string `xml:"ETag"`
		// The part checksums a client may repeat (one per algorithm).
		ChecksumCRC32     string `xml:"ChecksumCRC32"`
		ChecksumCRC32C    string `xml:"ChecksumCRC32C"`
		ChecksumCRC64NVME string `xml:"ChecksumCRC64NVME"`
		ChecksumSHA1      string `xml:"ChecksumSHA1"`
		ChecksumSHA256    string `xml:"ChecksumSHA256"`
	} `xml:"Part"`
}

type completeResult struct {
	XMLName  xml.Name `xml:"CompleteMultipartUploadResult"`
	NS       string   `xml:"xmlns,attr"`
	Location string   `xml:"Location"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	ETag     string   `xml:"ETag"`
	// res is the accepted write's result, whose headers a retried
	// Complete repeats (as a replay: it writes nothing).
	res gateway.Result
	// parts is the digest of the parts list that completed the upload
	// (partsDigest): only a Complete naming the same parts is its replay.
	parts [sha256.Size]byte
}

// partsDigest is the SHA-256 of a Complete's parts list as it names the
// parts: each part's number and ETag, without the quotes (the comparison
// the parts are checked by), in the list's order. The per-part checksums a
// client may repeat are left out: they are checks of the parts named, not
// names, and a retry may send them or not.
func partsDigest(cr *completeRequest) [sha256.Size]byte {
	h := sha256.New()
	for _, p := range cr.Parts {
		// Each ETag with its length, so that no ETag (XML allows any
		// character in one) can stand for the parts after it.
		etag := strings.Trim(p.ETag, `"`)
		fmt.Fprintf(h, "%d %d:%s", p.PartNumber, len(etag), etag)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

func (s *Server) completeUpload(w http.ResponseWriter, r *http.Request, t *target) error {
	bucket, key, st := t.bucket, t.key, t.st
	if err := queryAllowed(r, "CompleteMultipartUpload", "uploadId"); err != nil {
		return err
	}
	// If-Match, If-None-Match: NotImplemented as on PutObject, never dropped.
	if err := headersAllowed(r); err != nil {
		return err
	}
	u, err := s.uploads.get(r.URL.Query().Get("uploadId"), bucket, key, authOf(r))
	if err != nil {
		return err
	}
	req, err := s.fenced(r, bucket, key, http.MethodPut)
	if err != nil {
		return err
	}
	switch {
	case u.segment == 0:
	case req.AssignSegment:
		req.Segment, req.AssignSegment = u.segment, false
	case req.Segment != u.segment:
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "x-amz-meta-fence-segment %d differs from the %d the upload was created with", req.Segment, u.segment)
	}
	doc, err := s.document(r, false)
	if err != nil {
		return err
	}
	defer doc.Close()
	var cr completeRequest
	if err := xml.NewDecoder(io.LimitReader(doc.Reader(), maxDocument)).Decode(&cr); err != nil || len(cr.Parts) == 0 {
		return s3err(http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema.")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	named := partsDigest(&cr)
	if u.done != nil && u.done.parts != named {
		// A Complete after the upload was completed with another parts list
		// is refused, never answered with the first one's result: the object
		// it names was not written. NoSuchUpload (404) is CompleteMultipartUpload's
		// documented answer for an upload that is no longer open ("The
		// specified multipart upload does not exist. The upload ID might be
		// invalid, or the multipart upload might have been aborted or
		// completed.", https://docs.aws.amazon.com/AmazonS3/latest/API/API_CompleteMultipartUpload.html),
		// as this door answers an UploadPart or Abort after the completion;
		// InvalidPart (400) would say the list could be mended, but no list
		// but the one that completed it is answered with success, and
		// InvalidPartOrder is for an unsorted list.
		return noSuchUpload("has been completed with another list of parts")
	}
	if u.done != nil { // a retried Complete: the same answer, a replay that writes nothing
		again := u.done.res
		again.Replay = true
		answerReceipt(w, again)
		w.Header().Del("ETag")
		writeXML(w, http.StatusOK, u.done)
		return nil
	}
	if u.aborted { // aborted while this request was read
		return noSuchUpload("does not exist")
	}
	files, md5s := make([]io.Reader, 0, len(cr.Parts)), md5.New() //nolint:gosec
	var partSums []byte
	var closers []*os.File
	defer func() {
		for _, f := range closers {
			f.Close()
		}
	}()
	for i, cp := range cr.Parts {
		p := u.parts[cp.PartNumber]
		switch {
		case i > 0 && cp.PartNumber <= cr.Parts[i-1].PartNumber:
			return s3err(http.StatusBadRequest, "InvalidPartOrder", "The list of parts was not in ascending order.")
		case p == nil || strings.Trim(cp.ETag, `"`) != strings.Trim(p.etag, `"`):
			return s3err(http.StatusBadRequest, "InvalidPart", "One or more of the specified parts could not be found or its entity tag does not match.")
		case i < len(cr.Parts)-1 && p.size < minPartSize:
			return s3err(http.StatusBadRequest, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size.")
		}
		for _, c := range []string{cp.ChecksumCRC32, cp.ChecksumCRC32C, cp.ChecksumCRC64NVME, cp.ChecksumSHA1, cp.ChecksumSHA256} {
			if c != "" && c != p.checksum {
				return s3err(http.StatusBadRequest, "InvalidPart", "a part's checksum does not match the one it was uploaded with")
			}
		}
		if p.checksum != "" {
			raw, _ := base64.StdEncoding.DecodeString(p.checksum)
			partSums = append(partSums, raw...)
		}
		f, err := os.Open(p.path)
		if err != nil {
			return fencegate.Wrap(err, fencegate.CodeInternal, "a staged part is gone")
		}
		closers = append(closers, f)
		files = append(files, f)
		raw, _ := hex.DecodeString(strings.Trim(p.etag, `"`))
		md5s.Write(raw)
	}
	check, err := u.objectChecksum(r.Header, len(cr.Parts))
	if err != nil {
		return err
	}
	var also []io.Writer
	if check.full != nil {
		also = append(also, check.full)
	}
	body, err := spool.Copy(s.SpoolDir, io.MultiReader(files...), s.MaxBody, also...)
	if err != nil {
		return err
	}
	defer body.Close()
	if err := check.verify(body.SHA256, partSums); err != nil {
		return err
	}
	req.PayloadDigest = gateway.ObjectPayloadDigest(body.Digest(), u.contentType, u.meta)
	req.PayloadSize, req.QuarantinePayload = body.Size, body.Keep(s.QuarantinePayload)
	req.Effect = gateway.ObjectPut{Store: st, Key: key, Body: body.File(), Size: body.Size, ContentType: u.contentType, UserMeta: u.meta}
	res, err := s.Gateway.Apply(r.Context(), req)
	if err != nil {
		return err
	}
	answerReceipt(w, res)
	w.Header().Del("ETag")
	etag := res.Receipt.Version
	if etag == "" {
		etag = hex.EncodeToString(md5s.Sum(nil)) + "-" + strconv.Itoa(len(cr.Parts))
	}
	s.uploads.completed(u, &completeResult{NS: s3NS, Location: "/" + bucket + "/" + key, Bucket: bucket, Key: key,
		ETag: quoteETag(etag), res: res, parts: named})
	_ = os.RemoveAll(u.dir) // its parts with it; a retried Complete is answered from u.done
	s.uploads.unstaged(u)
	writeXML(w, http.StatusOK, u.done)
	return nil
}
