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
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
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
// is remembered for completedTTL, so a retried Complete naming the same
// parts gets the same answer (one naming others, NoSuchUpload: complete.go).

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
		contentType: headerValue(r.Header, "Content-Type"), dir: filepath.Join(s.uploads.dir, id),
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
	if headerValue(r.Header, "X-Amz-Copy-Source") != "" {
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
		return noSuchUpload("has been completed")
	}
	if u.aborted { // aborted while this part was read: its directory is gone
		return noSuchUpload("does not exist")
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
		return noSuchUpload("has been completed")
	}
	if u.aborted {
		return noSuchUpload("does not exist")
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
// longer: aborted, completed); why ends "The specified multipart upload ".
func noSuchUpload(why string) error {
	return s3err(http.StatusNotFound, "NoSuchUpload", "The specified multipart upload "+why+".")
}
