package s3door_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Rule: an empty or malformed x-amz-checksum-* value is 400 InvalidRequest
// before anything is admitted, as S3 answers it; it was taken for "no
// checksum" and the algorithm echoed as verified. The same holds for a
// part, and for CompleteMultipartUpload's object checksum.
func TestAnEmptyOrMalformedChecksumIsRefusedBeforeAdmission(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	body := "payload"
	sum := sha256.Sum256([]byte(body))
	good := hex.EncodeToString(sum[:])
	id, parts := upload(t, c, "r/m", []byte("part"), types.ChecksumAlgorithmCrc32, "")
	staged := e.filesUnder("s3-uploads")
	before := e.fingerprint("b/r")
	for name, hdr := range map[string]map[string]string{
		"an empty crc32":             {"X-Amz-Checksum-Crc32": ""},
		"a crc32 that is not base64": {"X-Amz-Checksum-Crc32": "not base64!"},
		"a crc32 of the wrong size":  {"X-Amz-Checksum-Crc32": base64.StdEncoding.EncodeToString(make([]byte, 8))},
		"an empty sha256":            {"X-Amz-Checksum-Sha256": ""},
	} {
		for _, path := range []string{"/b/r/x", "/b/r/m?partNumber=1&uploadId=" + aws.ToString(id)} {
			status, out := e.rawPut(t, "AKIDA", path, good, hdr, body)
			if status != 400 || !strings.Contains(out, "<Code>InvalidRequest</Code>") {
				t.Errorf("%s on %s: %d %s, want 400 InvalidRequest", name, path, status, out)
			}
		}
	}
	doc := "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>" + aws.ToString(parts[0].ETag) +
		"</ETag><ChecksumCRC32>" + aws.ToString(parts[0].ChecksumCRC32) + "</ChecksumCRC32></Part></CompleteMultipartUpload>"
	status, out := e.send(t, "AKIDA", "POST", "/b/r/m?uploadId="+aws.ToString(id), map[string]string{"X-Amz-Checksum-Crc32": ""}, doc)
	if status != 400 || !strings.Contains(out, "<Code>InvalidRequest</Code>") {
		t.Errorf("Complete with an empty crc32: %d %s, want 400 InvalidRequest", status, out)
	}
	if e.fingerprint("b/r") != before || e.filesUnder("s3-uploads") != staged {
		t.Fatal("a refused checksum changed state")
	}
}
