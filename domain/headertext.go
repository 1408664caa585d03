package domain

import (
	"encoding/base64"
	"mime"
	"strings"
	"unicode/utf8"
)

// Header values and S3 object metadata travel as US-ASCII text (S3's REST
// API refuses other bytes in x-amz-meta-* values; Amazon S3 stores values
// sent as RFC 2047 encoded words decoded, and answers non-ASCII ones
// encoded the same way). Operation IDs and roots may be any UTF-8 text.

// EncodeHeaderText is s as the value of a header both ends are Fencegate's
// (the REST API's Fence-Root and Fence-Operation-Id): s itself when it is
// printable ASCII holding no "=?" and no space at either end (HTTP trims
// those), else RFC 2047 "B" encoded words of its bytes, which
// DecodeHeaderText turns back into s exactly.
func EncodeHeaderText(s string) string {
	if !needsWords(s) {
		return s
	}
	return encodedWords(s)
}

// EncodeMetaText is s as an S3 metadata value, as Amazon S3 itself answers
// one: s when it is printable ASCII, else RFC 2047 "B" encoded words. Amazon
// S3 decodes words in a value it is sent, so the text of a metadata value
// is its decoded text (DecodeHeaderText) on every S3 store: a value that is
// itself encoded words stands for what they encode.
func EncodeMetaText(s string) string {
	if printableASCII(s) {
		return s
	}
	return encodedWords(s)
}

// encodedWords is s as UTF-8 "B" encoded words of at most 45 bytes each,
// split between runes, separated by spaces.
func encodedWords(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		n := min(len(s), 45)
		for n < len(s) && n > 1 && !utf8.RuneStart(s[n]) {
			n--
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("=?UTF-8?B?")
		b.WriteString(base64.StdEncoding.EncodeToString([]byte(s[:n])))
		b.WriteString("?=")
		s = s[n:]
	}
	return b.String()
}

// DecodeHeaderText is the text of a header or metadata value: its RFC 2047
// encoded words decoded (a value that is not well-formed is kept as it is).
func DecodeHeaderText(v string) string {
	if !strings.Contains(v, "=?") {
		return v
	}
	d, err := new(mime.WordDecoder).DecodeHeader(v)
	if err != nil {
		return v
	}
	return d
}

// needsWords reports whether s cannot travel as it is: a byte outside
// printable ASCII, "=?" (read as the start of a word), or a space at
// either end (trimmed from header values).
func needsWords(s string) bool {
	return !printableASCII(s) || strings.Contains(s, "=?") || strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ")
}

// printableASCII reports whether every byte of s is printable ASCII.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
