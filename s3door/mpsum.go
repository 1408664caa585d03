package s3door

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"hash"
	"net/http"
	"strconv"
	"strings"
)

// Checksums of multipart uploads
// (https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html#large-object-checksums):
// CreateMultipartUpload names the algorithm (x-amz-checksum-algorithm) and
// the type (x-amz-checksum-type: COMPOSITE, the default, or FULL_OBJECT);
// every part's checksum is verified as it is uploaded; a checksum sent with
// CompleteMultipartUpload is verified against the joined object: for
// FULL_OBJECT the checksum of the whole body, for COMPOSITE the checksum of
// the parts' checksums concatenated, followed by "-<number of parts>".

// uploadChecksum reads CreateMultipartUpload's checksum headers.
func uploadChecksum(hd http.Header) (alg, ctype string, err error) {
	for k, v := range hd {
		switch lk := strings.ToLower(k); lk {
		case "x-amz-checksum-algorithm":
			alg = strings.ToLower(joinValues(v))
			if _, ok := checksumAlgorithms[alg]; !ok {
				return "", "", s3err(http.StatusBadRequest, "InvalidRequest", "unsupported checksum algorithm "+joinValues(v))
			}
		case "x-amz-checksum-type":
			ctype = strings.ToUpper(joinValues(v))
			if ctype != "COMPOSITE" && ctype != "FULL_OBJECT" {
				return "", "", s3err(http.StatusBadRequest, "InvalidRequest", "x-amz-checksum-type must be COMPOSITE or FULL_OBJECT")
			}
		default:
			if strings.HasPrefix(lk, "x-amz-checksum-") {
				return "", "", notImplemented("CreateMultipartUpload with " + k)
			}
		}
	}
	if ctype != "" && alg == "" {
		return "", "", s3err(http.StatusBadRequest, "InvalidRequest", "x-amz-checksum-type needs x-amz-checksum-algorithm")
	}
	return alg, ctype, nil
}

// objectCheck is the check a Complete asks for: want ("" for none) in the
// upload's algorithm and type.
type objectCheck struct {
	u     *upload
	want  string
	parts int
	full  hash.Hash // FULL_OBJECT: fed the joined body (nil for sha256, which the spool computes)
}

func (u *upload) objectChecksum(hd http.Header, parts int) (*objectCheck, error) {
	c := &objectCheck{u: u, parts: parts}
	for k, v := range hd {
		alg, ok := strings.CutPrefix(strings.ToLower(k), "x-amz-checksum-")
		if !ok || alg == "type" || alg == "algorithm" {
			continue
		}
		if alg != u.algorithm {
			return nil, s3err(http.StatusBadRequest, "InvalidRequest", "the checksum's algorithm is not the upload's")
		}
		if c.want = joinValues(v); c.want == "" { // not "no checksum": refused, as S3 refuses it
			return nil, s3err(http.StatusBadRequest, "InvalidRequest", "Value for "+strings.ToLower(k)+" header is invalid.")
		}
	}
	if c.want != "" && u.checksumType == "FULL_OBJECT" {
		if mk := checksumAlgorithms[u.algorithm]; mk != nil {
			c.full = mk()
		}
	}
	return c, nil
}

func (c *objectCheck) verify(sha256sum, partSums []byte) error {
	if c.want == "" {
		return nil
	}
	var got string
	switch {
	case c.u.checksumType == "FULL_OBJECT" && c.full != nil:
		got = base64.StdEncoding.EncodeToString(c.full.Sum(nil))
	case c.u.checksumType == "FULL_OBJECT":
		got = base64.StdEncoding.EncodeToString(sha256sum)
	default:
		var h hash.Hash = sha256.New()
		if mk := checksumAlgorithms[c.u.algorithm]; mk != nil {
			h = mk()
		}
		h.Write(partSums)
		got = base64.StdEncoding.EncodeToString(h.Sum(nil)) + "-" + strconv.Itoa(c.parts)
		if !strings.Contains(c.want, "-") {
			got = strings.Split(got, "-")[0]
		}
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(c.want)) != 1 {
		return s3err(http.StatusBadRequest, "BadDigest", "The "+strings.ToUpper(c.u.algorithm)+" you specified did not match the calculated checksum.")
	}
	return nil
}
