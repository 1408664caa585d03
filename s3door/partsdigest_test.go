package s3door

import (
	"encoding/xml"
	"testing"
)

// Rule: two Complete documents naming different parts never share a parts
// digest, whatever their ETags hold: an ETag carrying a newline and the next
// part's number ("E1\n2 E2", which XML allows) once digested like the two
// parts it spells, and so would have been answered as their replay.
func TestDifferentPartsListsHaveDifferentDigests(t *testing.T) {
	parse := func(doc string) *completeRequest {
		var cr completeRequest
		if err := xml.Unmarshal([]byte(doc), &cr); err != nil {
			t.Fatal(err)
		}
		return &cr
	}
	two := parse(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>E1</ETag></Part><Part><PartNumber>2</PartNumber><ETag>E2</ETag></Part></CompleteMultipartUpload>`)
	one := parse("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>E1\n2 E2</ETag></Part></CompleteMultipartUpload>")
	if partsDigest(one) == partsDigest(two) {
		t.Fatal("one part whose ETag spells a second part digests as the two parts")
	}
	quoted := parse(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"E1"</ETag></Part><Part><PartNumber>2</PartNumber><ETag>"E2"</ETag></Part></CompleteMultipartUpload>`)
	if partsDigest(quoted) != partsDigest(two) {
		t.Fatal("the same parts with quoted ETags digest differently")
	}
}
