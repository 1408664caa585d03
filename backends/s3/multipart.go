package s3

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/fencegate/fencegate"
)

// putMultipart uploads a large body in parts and completes the upload under
// the request's condition; nothing is visible before completion, so only the
// completion can have an uncertain outcome. Failed uploads are aborted.
//
// A completion answered 409 ConditionalRequestConflict is not sent again:
// AWS's CompleteMultipartUpload reference (If-Match, If-None-Match) says "If
// a conflicting operation occurs during the upload S3 returns a 409
// ConditionalRequestConflict response. On a 409 failure you should
// re-initiate the multipart upload with CreateMultipartUpload and re-upload
// each part" (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CompleteMultipartUpload.html);
// the same completion sent again meets 404 NoSuchUpload. So the upload is
// aborted and the whole upload started afresh from the (seekable) body, at
// most conflictRetries times, with retryConflict's backoff, while the
// context lasts and the landing deadline has not passed. Each completion
// carries the same condition, so a fresh upload never lands over an earlier
// one of this write that did (it fails its condition, which the gateway
// reconciles from the object). A conflict that outlasts them is translated
// as any persistent 409 is: no definite answer.
func (s *Store) putMultipart(ctx context.Context, req fencegate.PutRequest, body io.ReadSeeker, start int64) (string, error) {
	if !s.Capabilities().ConditionalMultipart {
		return "", fencegate.Errorf(fencegate.CodeUnsupported,
			"store %q: object of %d bytes needs a multipart upload, and the store ignores conditions on completing one", s.name, req.Size)
	}
	if req.IfMatch != "" { // fail fast before uploading; the completion decides
		info, err := s.Head(ctx, req.Key)
		if fencegate.ErrorCode(err) == fencegate.CodeNotFound || (err == nil && info.ETag != req.IfMatch) {
			return "", s.precondition(errPrecondition, "put", req.Key)
		}
	}
	delay := firstConflictDelay
	for i := 0; ; i++ {
		etag, err := s.uploadOnce(ctx, req, body, start)
		var ce *completionError
		if !errors.As(err, &ce) {
			return etag, err // done, or failed before the completion (translated)
		}
		if isConflict(ce.err) && i < conflictRetries && backoff(ctx, &delay) && s.checkLandBy(ctx, "put", req.Key) == nil {
			continue // re-initiate: the conflicting upload was aborted
		}
		if req.IfMatch != "" && missingKey(ce.err) {
			return "", s.precondition(ce.err, "complete multipart upload of", req.Key)
		}
		return "", s.translate(ce.err, "complete multipart upload of", req.Key, true)
	}
}

// completionError carries the untranslated error of CompleteMultipartUpload
// out of uploadOnce, for putMultipart to retry or translate.
type completionError struct{ err error }

func (e *completionError) Error() string { return e.err.Error() }
func (e *completionError) Unwrap() error { return e.err }

// uploadOnce runs one multipart upload of req: CreateMultipartUpload, the
// parts, then CompleteMultipartUpload under req's condition; the upload is
// aborted when any step fails. An error before the completion is
// translated; the completion's own is returned as a *completionError.
func (s *Store) uploadOnce(ctx context.Context, req fencegate.PutRequest, body io.ReadSeeker, start int64) (etag string, err error) {
	key := s.full(req.Key)
	cin := &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: key, Metadata: encodeMeta(req.Metadata())}
	if req.ContentType != "" {
		cin.ContentType = aws.String(req.ContentType)
	}
	created, err := s.client.CreateMultipartUpload(ctx, cin)
	if err != nil {
		return "", s.translate(err, "start multipart upload of", req.Key, false)
	}
	uploadID := created.UploadId
	defer func() {
		if err != nil {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_, _ = s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: key, UploadId: uploadID})
		}
	}()

	partSize := max(s.partSize, (req.Size+maxParts-1)/maxParts)
	var parts []types.CompletedPart
	for n, off := int32(1), int64(0); off < req.Size; n, off = n+1, off+partSize {
		size := min(partSize, req.Size-off)
		sec := &section{r: body, base: start + off, size: size}
		out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{Bucket: &s.bucket, Key: key, UploadId: uploadID,
			PartNumber: aws.Int32(n), Body: sec, ContentLength: aws.Int64(size)})
		if err != nil {
			return "", s.translate(err, "upload part of", req.Key, false)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(n), ETag: out.ETag,
			ChecksumCRC32: out.ChecksumCRC32, ChecksumCRC32C: out.ChecksumCRC32C, ChecksumCRC64NVME: out.ChecksumCRC64NVME,
			ChecksumSHA1: out.ChecksumSHA1, ChecksumSHA256: out.ChecksumSHA256})
	}
	in := &s3.CompleteMultipartUploadInput{Bucket: &s.bucket, Key: key, UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}
	if req.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(req.IfMatch)
	}
	out, err := s.client.CompleteMultipartUpload(ctx, in, landByOptions(ctx)...)
	if err != nil {
		return "", &completionError{err}
	}
	return aws.ToString(out.ETag), nil
}

// errPrecondition stands in for a 412 found by the early ETag check.
var errPrecondition = errors.New("object is missing or its ETag differs from If-Match")

// section exposes bytes [base, base+size) of a shared ReadSeeker as a
// ReadSeeker of its own, so a part can be re-read (signing, retries) without
// buffering it. Parts are uploaded one at a time, so sharing r is safe.
type section struct {
	r          io.ReadSeeker
	base, size int64
	pos        int64
	positioned bool
}

func (s *section) Read(p []byte) (int, error) {
	if s.pos >= s.size {
		return 0, io.EOF
	}
	if !s.positioned {
		if _, err := s.r.Seek(s.base+s.pos, io.SeekStart); err != nil {
			return 0, err
		}
		s.positioned = true
	}
	if rem := s.size - s.pos; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := s.r.Read(p)
	s.pos += int64(n)
	if err == io.EOF && s.pos < s.size {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (s *section) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		offset += s.pos
	case io.SeekEnd:
		offset += s.size
	}
	if offset < 0 {
		return 0, errors.New("section: negative position")
	}
	s.pos, s.positioned = offset, false
	return offset, nil
}
