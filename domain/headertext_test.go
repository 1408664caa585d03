package domain

import (
	"strings"
	"testing"
)

// Rule: every text an operation ID, root or metadata value may hold comes
// back exactly through EncodeHeaderText and DecodeHeaderText, and travels
// as printable ASCII; printable ASCII without "=?" travels as it is.
func TestHeaderTextRoundTripsAsPrintableASCII(t *testing.T) {
	for _, s := range []string{
		"", "op-1", "plain text", "Bestellung Müller", "日本語のオペレーション", "😀" + strings.Repeat("é", 140),
		"=?UTF-8?B?w6k=?=", "a =?x?= b", strings.Repeat("ab=?", 70), "\xff\xfe not UTF-8", "tab\there", " order 42 ",
	} {
		enc := EncodeHeaderText(s)
		for i := 0; i < len(enc); i++ {
			if enc[i] < ' ' || enc[i] > '~' {
				t.Fatalf("%q travels as %q: byte %#x is not printable ASCII", s, enc, enc[i])
			}
		}
		if got := DecodeHeaderText(enc); got != s {
			t.Fatalf("%q travels as %q and comes back as %q", s, enc, got)
		}
		if !needsWords(s) && enc != s {
			t.Fatalf("printable ASCII %q was encoded as %q", s, enc)
		}
	}
	if got := DecodeHeaderText("=?UTF-8?B?Q3LDqG1lIGJyw7tsw6ll?="); got != "Crème brûlée" { // as Amazon S3 answers it
		t.Fatalf("Amazon S3's encoding decodes to %q", got)
	}
}

// Rule: an S3 metadata value travels as Amazon S3 answers one: printable
// ASCII as it is (even holding "=?"), anything else as encoded words whose
// decoded text is the value.
func TestMetaTextIsEncodedAsAmazonS3AnswersIt(t *testing.T) {
	for _, s := range []string{"ascii", "https://x.example/p?a=?b", "=?UTF-8?B?w6k=?="} {
		if got := EncodeMetaText(s); got != s {
			t.Fatalf("printable ASCII %q encoded as %q", s, got)
		}
	}
	for _, s := range []string{"Crème brûlée", "日本", "\xff raw"} {
		enc := EncodeMetaText(s)
		if !printableASCII(enc) || DecodeHeaderText(enc) != s {
			t.Fatalf("%q encoded as %q, decoded as %q", s, enc, DecodeHeaderText(enc))
		}
	}
}
