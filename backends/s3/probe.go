package s3

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/fencegate/fencegate"
)

// wrongETag is an ETag no object has.
const wrongETag = `"00000000000000000000000000000000"`

// Probe checks, on scratch keys under the prefix (.fencegate-probe/<random>/),
// that a HEAD answers the ETag the PUT of the object answered, that the store
// refuses a wrong If-Match, a second If-None-Match: * and an
// If-Match on a missing key, and a presigned write whose X-Amz-Date +
// X-Amz-Expires passed (probeExpiry). If it accepts any of them Probe returns an
// UNSUPPORTED error naming the store and the missing capability: such a store
// cannot keep the fencing contract. It also finds whether DeleteObject and
// CompleteMultipartUpload honour their conditions (not fatal), records the
// result in the store and returns it. Scratch keys are removed.
func (s *Store) Probe(ctx context.Context) (Capabilities, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	dir := ".fencegate-probe/" + hex.EncodeToString(b) + "/"
	a, missing, mp, expired := dir+"a", dir+"missing", dir+"multipart", dir+"expired"
	defer s.cleanup(ctx, a, missing, mp, expired)

	// The conditional writes are sent as an effect sends them: presigned
	// with a landing deadline (landby.go), so the conditions are checked on
	// presigned requests, and a store that cannot take those fails here.
	pctx := fencegate.WithLandBy(ctx, time.Now().Add(probeLandBy))
	put := func(key string, ifNoneMatch bool, ifMatch string) (string, error) {
		return s.Put(pctx, fencegate.PutRequest{Key: key, Body: strings.NewReader("probe"), Size: 5,
			ContentType: "text/plain", IfNoneMatch: ifNoneMatch, IfMatch: ifMatch})
	}
	refuse := func(err error, header, what string) error {
		if err == nil {
			return fencegate.Errorf(fencegate.CodeUnsupported, "store %q ignores %s: %s succeeded", s.name, header, what)
		}
		// A 412 (or S3's 404 NoSuchKey for If-Match on a missing key); a 409
		// that persisted through retries proves nothing.
		if !errors.Is(err, fencegate.ErrPreconditionFailed) || isConflict(err) {
			return fencegate.Wrap(err, fencegate.ErrorCode(err),
				fmt.Sprintf("store %q: probing %s: %s was not refused as a failed precondition", s.name, header, what))
		}
		return nil
	}

	etag, err := put(a, true, "")
	if err != nil {
		return Capabilities{}, fencegate.Wrap(err, fencegate.ErrorCode(err), fmt.Sprintf("store %q: probe: conditional create failed", s.name))
	}
	// The gateway records the ETag a PUT answers and chains the next write
	// on it (If-Match), while a proof or a reconciler records the ETag a HEAD
	// answers: a store whose two differ would refuse every later write to
	// the key.
	head, err := s.Head(ctx, a)
	if err != nil {
		return Capabilities{}, fencegate.Wrap(err, fencegate.ErrorCode(err), fmt.Sprintf("store %q: probe: reading back the conditional create failed", s.name))
	}
	if etag == "" || head.ETag != etag {
		return Capabilities{}, fencegate.Errorf(fencegate.CodeUnsupported,
			"store %q answers ETag %q to a PUT and %q to a HEAD of the same object: writes are chained on the ETag, which must be the same", s.name, etag, head.ETag)
	}
	_, err = put(a, true, "")
	if err := refuse(err, "If-None-Match", "a second conditional create"); err != nil {
		return Capabilities{}, err
	}
	_, err = put(a, false, wrongETag)
	if err := refuse(err, "If-Match", "a write with a wrong ETag"); err != nil {
		return Capabilities{}, err
	}
	_, err = put(missing, false, etag)
	if err := refuse(err, "If-Match on a missing key", "a conditional write to a missing key"); err != nil {
		return Capabilities{}, err
	}

	if err := s.probeExpiry(ctx, expired); err != nil {
		return Capabilities{}, err
	}

	caps := Capabilities{ConditionalDelete: s.probeDelete(ctx, a), ConditionalMultipart: s.probeMultipart(ctx, mp)}
	s.mu.Lock()
	s.caps = caps
	s.mu.Unlock()
	return caps, nil
}

// probeLandBy is the landing deadline of the probe's conditional writes.
const probeLandBy = time.Minute

// probeExpiredBy is how long before the probe its expired write is signed.
// The write expires at most two seconds after that (X-Amz-Expires is at
// least 1, X-Amz-Date has whole seconds), so a store whose clock lags this
// gateway's by less than about half a minute still refuses it, and one that
// lags more (or ignores the expiry) is refused at start-up.
const probeExpiredBy = 30 * time.Second

// probeExpiry sends a conditional create of key presigned so that it expired
// before it was sent. Every object write of an effect is presigned to expire
// at the write's deadline (landby.go), and the reconciler calls a write
// NOT_APPLIED only after that deadline plus its grace: a store that applies
// an expired presigned write breaks that rule, so such a store is
// UNSUPPORTED. The store must refuse it (any 4xx; S3 answers 403
// AccessDenied, "Request has expired") and the key must not exist afterwards.
//
// It is sent the way the store sends writes: by putDirect when the store has
// a put template, else through the SDK.
func (s *Store) probeExpiry(ctx context.Context, key string) error {
	at := time.Now().Add(-probeExpiredBy)
	var err error
	if s.tmpl != nil {
		_, err = s.putDirect(ctx, s.tmpl, putObject{key: *s.full(key), body: strings.NewReader("probe"), size: 5, ifNoneMatch: true},
			at.Add(time.Second), at, new(attemptCounter))
	} else {
		_, err = s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: s.full(key),
			Body: strings.NewReader("probe"), ContentLength: aws.Int64(5), IfNoneMatch: aws.String("*")},
			presignOptions(at.Add(time.Second), at)...)
	}
	lax := fencegate.Errorf(fencegate.CodeUnsupported,
		"store %q applies a presigned write after its X-Amz-Expires (or its clock lags this gateway's by more than %s): a write the reconciler settled NOT_APPLIED could still land",
		s.name, probeExpiredBy)
	if err == nil {
		return lax
	}
	if st, _ := status(err); st < 400 || st >= 500 {
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("store %q: probing X-Amz-Expires: an expired presigned write was not refused", s.name))
	}
	if _, herr := s.Head(ctx, key); fencegate.ErrorCode(herr) != fencegate.CodeNotFound {
		return lax
	}
	return nil
}

// probeDelete reports whether a DeleteObject with a wrong If-Match is refused
// with 412 while one with the right ETag deletes.
func (s *Store) probeDelete(ctx context.Context, key string) bool {
	info, err := s.Head(ctx, key)
	if err != nil {
		return false
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: s.full(key), IfMatch: aws.String(wrongETag)})
	if err == nil || !isPrecondition(err) {
		return false
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: s.full(key), IfMatch: aws.String(info.ETag)})
	if err != nil {
		return false
	}
	_, err = s.Head(ctx, key)
	return fencegate.ErrorCode(err) == fencegate.CodeNotFound
}

// probeMultipart reports whether CompleteMultipartUpload refuses a second
// If-None-Match: * and a wrong If-Match (one-part uploads of a few bytes).
func (s *Store) probeMultipart(ctx context.Context, key string) bool {
	complete := func(ifNoneMatch, ifMatch *string) error {
		up, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: s.full(key)})
		if err != nil {
			return err
		}
		part, err := s.client.UploadPart(ctx, &s3.UploadPartInput{Bucket: &s.bucket, Key: s.full(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(1), Body: strings.NewReader("probe"), ContentLength: aws.Int64(5)})
		if err == nil {
			_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &s.bucket, Key: s.full(key),
				UploadId: up.UploadId, IfNoneMatch: ifNoneMatch, IfMatch: ifMatch,
				MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: part.ETag,
					ChecksumCRC32: part.ChecksumCRC32, ChecksumCRC32C: part.ChecksumCRC32C, ChecksumCRC64NVME: part.ChecksumCRC64NVME,
					ChecksumSHA1: part.ChecksumSHA1, ChecksumSHA256: part.ChecksumSHA256}}}})
		}
		if err != nil {
			_, _ = s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: s.full(key), UploadId: up.UploadId})
		}
		return err
	}
	if err := complete(aws.String("*"), nil); err != nil {
		return false
	}
	return isPrecondition(complete(aws.String("*"), nil)) && isPrecondition(complete(nil, aws.String(wrongETag)))
}

// cleanup removes the probe's scratch keys unconditionally.
func (s *Store) cleanup(ctx context.Context, keys ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, k := range keys {
		_, _ = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: s.full(k)})
	}
}
