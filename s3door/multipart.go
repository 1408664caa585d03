package s3door

import (
	"crypto/md5" //nolint:gosec // S3's part ETags are MD5s
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/spool"
)

// Multipart uploads (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CreateMultipartUpload.html
// and the UploadPart, CompleteMultipartUpload, AbortMultipartUpload and
// ListParts pages). The parts are staged in this gateway's spool directory,
// not in the store: CompleteMultipartUpload joins them into one body and
// writes it as ONE fenced effect through the acceptance point (one segment,
// one receipt, the conditional chain of a PutObject), so a superseded owner's
// upload is refused whole at completion and no part of it ever reaches the
// store. Every step is signed and prechecked against the lease, so a stale
// owner cannot stage parts either. The staging lives in this process only:
// a restart forgets open uploads (NoSuchUpload), and with several replicas an
// upload's requests must reach the one that created it. A completed upload
// is remembered for completedTTL, so a retried Complete gets the same answer.

const (
	minPartSize  = 5 << 20
	maxParts     = 10000
	completedTTL = 15 * time.Minute
	// MaxOpenUploads bounds the open multipart uploads of one credential,
	// MaxOpenUploadsPerIdentity those of one workload identity over all its
	// leases (so that one cannot take the process's all), and
	// MaxOpenUploadsTotal those of the process: a further
	// CreateMultipartUpload is refused (TooManyUploads) until one is
	// completed, aborted or idle past UploadIdle, or its lease is read
	// ended (ended.go: the uploads of ended leases give way to a create
	// they would refuse, another lease's only). Their staged bytes are
	// bounded by Server.MaxBody per upload, Server.StagingBytesPerIdentity
	// per identity and Server.StagingBytes in all.
	MaxOpenUploads            = 64
	MaxOpenUploadsPerIdentity = 256
	MaxOpenUploadsTotal       = 1024
	// UploadIdle is how long an open upload may go without a request
	// naming it before it is forgotten and its parts removed.
	UploadIdle = 24 * time.Hour
)

type initiateResult struct {
	XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
	NS       string   `xml:"xmlns,attr"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	UploadID string   `xml:"UploadId"`
}

func (s *Server) createUpload(w http.ResponseWriter, r *http.Request, t *target) error {
	bucket, key := t.bucket, t.key
	if err := queryAllowed(r, "CreateMultipartUpload", "uploads"); err != nil {
		return err
	}
	if err := objectHeadersAllowed(r); err != nil {
		return err
	}
	segment, err := s.staged(r, bucket, key)
	if err != nil {
		return err
	}
	alg, ctype, err := uploadChecksum(r.Header)
	if err != nil {
		return err
	}
	meta, err := userMeta(r.Header)
	if err != nil {
		return err
	}
	id := gateway.NewID("mpu_")
	c := authOf(r).cred
	u := &upload{id: id, bucket: bucket, key: key, identity: c.Identity, akid: c.AccessKeyID,
		contentType: r.Header.Get("Content-Type"), dir: filepath.Join(s.uploads.dir, id),
		created: s.Now(), touched: s.Now(), parts: map[int]*part{}, algorithm: alg, checksumType: ctype, meta: meta, segment: segment}
	if err = s.uploads.add(u); err != nil { // TooManyUploads: the uploads of ended leases give way
		s.makeRoom(r.Context(), u)
		err = s.uploads.add(u) // also when others made room meanwhile
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(u.dir, 0o700); err != nil {
		s.uploads.remove(u)
		return fencegate.Wrap(err, fencegate.CodeInternal, "cannot stage the upload")
	}
	writeXML(w, http.StatusOK, initiateResult{NS: s3NS, Bucket: bucket, Key: key, UploadID: id})
	return nil
}

func (s *Server) uploadPart(w http.ResponseWriter, r *http.Request, t *target) error {
	bucket, key := t.bucket, t.key
	if err := queryAllowed(r, "UploadPart", "uploadId", "partNumber"); err != nil {
		return err
	}
	if r.Header.Get("X-Amz-Copy-Source") != "" {
		return notImplemented("UploadPartCopy")
	}
	n, err := strconv.Atoi(r.URL.Query().Get("partNumber"))
	if err != nil || n < 1 || n > maxParts {
		return s3err(http.StatusBadRequest, "InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive")
	}
	u, err := s.uploads.get(r.URL.Query().Get("uploadId"), bucket, key, authOf(r))
	if err != nil {
		return err
	}
	if _, err := s.staged(r, bucket, key); err != nil {
		return err
	}
	fr, err := framingOf(r)
	var need int64
	if err == nil {
		need, err = s.partRoom(fr, u, n)
	}
	if err == nil {
		err = s.uploads.reserve(u.identity, need)
	}
	if err != nil {
		drainRefused(r)
		return err
	}
	settled := false
	defer func() {
		if !settled {
			s.uploads.release(u, need)
		}
	}()
	h := md5.New() //nolint:gosec
	// A part sent without a checksum of an upload created with one gets it
	// computed here, as S3 does, so that the upload's COMPOSITE checksum
	// covers every part (own: the upload's algorithm over the part; nil for
	// sha256, which the spool computes).
	var (
		own  hash.Hash
		also io.Writer = h
	)
	if mk := checksumAlgorithms[u.algorithm]; mk != nil {
		own = mk()
		also = io.MultiWriter(h, own)
	}
	body, alg, sum, err := s.part(r, fr, also)
	if err != nil {
		return err
	}
	defer body.Close()
	path := filepath.Join(u.dir, strconv.Itoa(n))
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done != nil {
		return s3err(http.StatusNotFound, "NoSuchUpload", "The specified multipart upload has been completed.")
	}
	if u.aborted { // aborted while this part was read: its directory is gone
		return noSuchUpload()
	}
	// A part's checksum of another algorithm than the upload's, or of an
	// upload created without one, is refused before it replaces a staged
	// part, as S3 refuses it ("Checksum Type mismatch occurred, expected
	// checksum Type: null, actual checksum Type: crc32"): it could be
	// neither kept nor listed again at completion.
	if alg != "" && alg != u.algorithm {
		want := u.algorithm
		if want == "" {
			want = "null"
		}
		return s3err(http.StatusBadRequest, "InvalidRequest", "Checksum Type mismatch occurred, expected checksum Type: "+want+", actual checksum Type: "+alg)
	}
	if u.stagedBeside(n, body.Size) > s.MaxBody { // the completed object could not be written anyway
		return partsTooLarge(s.MaxBody)
	}
	if err := os.Rename(body.File().Name(), path); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "cannot stage the part")
	}
	var replaced int64
	if old := u.parts[n]; old != nil {
		replaced = chargeOf(old.size)
	}
	s.uploads.settle(u, need, replaced)
	settled = true
	p := &part{number: n, size: body.Size, etag: `"` + hex.EncodeToString(h.Sum(nil)) + `"`, path: path, at: s.Now()}
	switch {
	case alg == u.algorithm:
		p.checksum = sum
	case alg == "" && own != nil:
		p.checksum = base64.StdEncoding.EncodeToString(own.Sum(nil))
	case alg == "": // sha256
		p.checksum = base64.StdEncoding.EncodeToString(body.SHA256)
	}
	u.parts[n] = p
	s.uploads.touch(u) // a long part upload counts from its end
	switch {
	case alg != "":
		w.Header().Set("x-amz-checksum-"+alg, sum)
	case p.checksum != "":
		w.Header().Set("x-amz-checksum-"+u.algorithm, p.checksum)
	}
	w.Header().Set("ETag", p.etag)
	w.WriteHeader(http.StatusOK)
	return nil
}

// maxRefusedDrain is the most of a part's body drainRefused reads.
const maxRefusedDrain = 64 << 20

// drainRefused reads and drops up to maxRefusedDrain of the body of a part
// refused before it was read (its room in the upload, its identity's share
// or the staging budget), touching no disk. A client that sends the body
// without waiting for "100 Continue" otherwise meets a connection reset for
// the unread body instead of the answer; a part larger than that still may.
// Which clients wait cannot be told from the request: aws-sdk-go-v2 sends
// "Expect: 100-continue" and does not wait (net/http ignores it on requests
// without a protocol version), so every refused part is drained, and a
// client that does wait (aws cli, boto3) is told to send the part before its
// answer.
func drainRefused(r *http.Request) {
	_, _ = io.CopyN(io.Discard, r.Body, maxRefusedDrain)
}

// partRoom is what part n of u, about to be read framed as fr, counts
// against the staging budget: its declared length (refused up front when
// unknown, 411 MissingContentLength as S3 answers, or when the upload's
// other parts and it would exceed MaxBody, EntityTooLarge), at least
// MinPartCharge.
func (s *Server) partRoom(fr framing, u *upload, n int) (int64, error) {
	size := fr.declared
	if size < 0 {
		return 0, s3err(http.StatusLengthRequired, "MissingContentLength", "You must provide the Content-Length HTTP header (x-amz-decoded-content-length with aws-chunked).")
	}
	u.mu.Lock()
	staged := u.stagedBeside(n, size)
	u.mu.Unlock()
	if staged > s.MaxBody {
		return 0, partsTooLarge(s.MaxBody)
	}
	return chargeOf(size), nil
}

// partsTooLarge refuses a part that would take an upload's parts past max.
func partsTooLarge(max int64) error {
	return s3err(http.StatusBadRequest, "EntityTooLarge", "the upload's parts would exceed the gateway's limit of "+strconv.FormatInt(max, 10)+" bytes")
}

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
	if err := xml.NewDecoder(io.LimitReader(doc.Reader(), 4<<20)).Decode(&cr); err != nil || len(cr.Parts) == 0 {
		return s3err(http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema.")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done != nil { // a retried Complete: the same answer, a replay that writes nothing
		again := u.done.res
		again.Replay = true
		answerReceipt(w, again)
		w.Header().Del("ETag")
		writeXML(w, http.StatusOK, u.done)
		return nil
	}
	if u.aborted { // aborted while this request was read
		return noSuchUpload()
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
		ETag: quoteETag(etag), res: res})
	_ = os.RemoveAll(u.dir) // its parts with it; a retried Complete is answered from u.done
	s.uploads.unstaged(u)
	writeXML(w, http.StatusOK, u.done)
	return nil
}

func (s *Server) abortUpload(w http.ResponseWriter, r *http.Request, t *target) error {
	bucket, key := t.bucket, t.key
	if err := queryAllowed(r, "AbortMultipartUpload", "uploadId"); err != nil {
		return err
	}
	u, err := s.uploads.get(r.URL.Query().Get("uploadId"), bucket, key, authOf(r))
	if err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done != nil {
		return s3err(http.StatusNotFound, "NoSuchUpload", "The specified multipart upload has been completed.")
	}
	if u.aborted {
		return noSuchUpload()
	}
	s.uploads.abort(u)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type listPartsResult struct {
	XMLName              xml.Name   `xml:"ListPartsResult"`
	NS                   string     `xml:"xmlns,attr"`
	Bucket               string     `xml:"Bucket"`
	Key                  string     `xml:"Key"`
	UploadID             string     `xml:"UploadId"`
	PartNumberMarker     int        `xml:"PartNumberMarker"`
	NextPartNumberMarker int        `xml:"NextPartNumberMarker"`
	MaxParts             int        `xml:"MaxParts"`
	IsTruncated          bool       `xml:"IsTruncated"`
	StorageClass         string     `xml:"StorageClass"`
	Parts                []listPart `xml:"Part"`
}

type listPart struct {
	PartNumber   int    `xml:"PartNumber"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int64  `xml:"Size"`
}

func (s *Server) listParts(w http.ResponseWriter, r *http.Request, t *target) error {
	bucket, key := t.bucket, t.key
	if err := queryAllowed(r, "ListParts", "uploadId", "max-parts", "part-number-marker"); err != nil {
		return err
	}
	u, err := s.uploads.get(r.URL.Query().Get("uploadId"), bucket, key, authOf(r))
	if err != nil {
		return err
	}
	q := r.URL.Query()
	maxP, marker := 1000, 0
	if v := q.Get("max-parts"); v != "" {
		if maxP, err = strconv.Atoi(v); err != nil || maxP < 0 {
			return s3err(http.StatusBadRequest, "InvalidArgument", "max-parts must be a non-negative integer")
		}
		maxP = min(maxP, 1000)
	}
	if v := q.Get("part-number-marker"); v != "" {
		if marker, err = strconv.Atoi(v); err != nil {
			return s3err(http.StatusBadRequest, "InvalidArgument", "part-number-marker must be an integer")
		}
	}
	u.mu.Lock()
	var nums []int
	for n := range u.parts {
		if n > marker {
			nums = append(nums, n)
		}
	}
	sort.Ints(nums)
	out := listPartsResult{NS: s3NS, Bucket: bucket, Key: key, UploadID: u.id, PartNumberMarker: marker, MaxParts: maxP, StorageClass: "STANDARD"}
	for _, n := range nums {
		if len(out.Parts) == maxP {
			out.IsTruncated = true
			break
		}
		p := u.parts[n]
		out.Parts = append(out.Parts, listPart{PartNumber: n, ETag: p.etag, Size: p.size,
			LastModified: p.at.UTC().Format("2006-01-02T15:04:05.000Z")})
		out.NextPartNumberMarker = n
	}
	u.mu.Unlock()
	writeXML(w, http.StatusOK, out)
	return nil
}

// noSuchUpload is S3's answer for an upload ID it does not know (or no
// longer: aborted).
func noSuchUpload() error {
	return s3err(http.StatusNotFound, "NoSuchUpload", "The specified multipart upload does not exist.")
}
