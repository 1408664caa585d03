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
// that a HEAD answers the ETag the PUT of the object answered, that an
// overwrite chained (If-Match) on that ETag succeeds, that the store refuses
// a wrong If-Match, a second If-None-Match: * and an If-Match on a missing
// key, and a presigned write whose X-Amz-Date + X-Amz-Expires passed
// (probeExpiry). If any of them goes the other way Probe returns an
// UNSUPPORTED error naming the store and the missing capability: such a
// store cannot keep the fencing contract. It also finds whether DeleteObject
// and CompleteMultipartUpload honour their conditions (not fatal), records
// the result in the store and returns it. Scratch keys are removed.
func (s *Store) Probe(ctx context.Context) (Capabilities, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	dir := ".fencegate-probe/" + hex.EncodeToString(b) + "/"
	a, missing, mp, mpMissing, expired := dir+"a", dir+"missing", dir+"multipart", dir+"multipart-missing", dir+"expired"
	defer s.cleanup(ctx, a, missing, mp, mpMissing, expired)

	// The conditional writes are sent as an effect sends them: presigned
	// with a landing deadline (landby.go), so the conditions are checked on
	// presigned requests, and a store that cannot take those fails here.
	pctx := fencegate.WithLandBy(ctx, time.Now().Add(probeLandBy))
	put := func(key string, ifNoneMatch bool, ifMatch string) (string, error) {
		return s.Put(pctx, fencegate.PutRequest{Key: key, Body: strings.NewReader("probe"), Size: 5,
			ContentType: "text/plain", IfNoneMatch: ifNoneMatch, IfMatch: ifMatch})
	}
	overwrite := func(key, ifMatch string) (string, error) {
		return s.Put(pctx, fencegate.PutRequest{Key: key, Body: strings.NewReader("probe, again"), Size: 12,
			ContentType: "text/plain", IfMatch: ifMatch})
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
	// Every write after a key's first is chained on the ETag the store
	// answered to the one before (S3: PutObject with If-Match "uploads the
	// object only if the ETag ... matches the ETag of the object in S3",
	// Amazon S3 API Reference). A store that refuses that too (weak ETags,
	// which If-Match's strong comparison never matches, RFC 9110 §13.1.1;
	// an ETag compared without its quotes) would fail every second write of
	// a key after the gateway admitted it, leaving the key stuck.
	if _, err := overwrite(a, etag); err != nil {
		if errors.Is(err, fencegate.ErrPreconditionFailed) {
			return Capabilities{}, fencegate.Errorf(fencegate.CodeUnsupported,
				"store %q refuses If-Match with the ETag it answered itself (%s): every write after a key's first would fail its condition", s.name, etag)
		}
		return Capabilities{}, fencegate.Wrap(err, fencegate.ErrorCode(err), fmt.Sprintf("store %q: probe: a write chained on the ETag the store answered failed", s.name))
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

	caps := Capabilities{ConditionalDelete: s.probeDelete(ctx, a), ConditionalMultipart: s.probeMultipart(ctx, mp, mpMissing)}
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

// probeMultipart reports whether CompleteMultipartUpload keeps the
// conditions putMultipart relies on (one-part uploads of a few bytes): it
// refuses a second If-None-Match: *, a wrong If-Match and an If-Match on
// missing (a key that does not exist), and takes an If-Match on the ETag the
// completion before it answered. S3 documents If-Match on
// CompleteMultipartUpload as on PutObject (412 when the ETags differ; a
// missing key is answered 404 NoSuchKey, errors.go). A store that completed
// an If-Match upload on a missing key would re-create an object deleted
// behind the gateway's back during the upload and settle the write
// COMMITTED, not BACKEND_CONFLICT; one that refused the right ETag would
// fail every multipart overwrite after its admission.
func (s *Store) probeMultipart(ctx context.Context, key, missing string) bool {
	complete := func(key string, ifNoneMatch, ifMatch *string) (string, error) {
		up, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: s.full(key)})
		if err != nil {
			return "", err
		}
		var out *s3.CompleteMultipartUploadOutput
		part, err := s.client.UploadPart(ctx, &s3.UploadPartInput{Bucket: &s.bucket, Key: s.full(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(1), Body: strings.NewReader("probe"), ContentLength: aws.Int64(5)})
		if err == nil {
			out, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &s.bucket, Key: s.full(key),
				UploadId: up.UploadId, IfNoneMatch: ifNoneMatch, IfMatch: ifMatch,
				MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: part.ETag,
					ChecksumCRC32: part.ChecksumCRC32, ChecksumCRC32C: part.ChecksumCRC32C, ChecksumCRC64NVME: part.ChecksumCRC64NVME,
					ChecksumSHA1: part.ChecksumSHA1, ChecksumSHA256: part.ChecksumSHA256}}}})
		}
		if err != nil {
			_, _ = s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: s.full(key), UploadId: up.UploadId})
			return "", err
		}
		return aws.ToString(out.ETag), nil
	}
	etag, err := complete(key, aws.String("*"), nil)
	if err != nil || etag == "" {
		return false
	}
	if _, err := complete(key, aws.String("*"), nil); !isPrecondition(err) {
		return false
	}
	if _, err := complete(key, nil, aws.String(wrongETag)); !isPrecondition(err) {
		return false
	}
	if _, err := complete(missing, nil, aws.String(etag)); !isPrecondition(err) && !missingKey(err) {
		return false
	}
	_, err = complete(key, nil, aws.String(etag))
	return err == nil
}

// cleanup removes the probe's scratch keys unconditionally.
func (s *Store) cleanup(ctx context.Context, keys ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, k := range keys {
		_, _ = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: s.full(k)})
	}
}
