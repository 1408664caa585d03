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

// EncodeHeaderText is s as a header or metadata value: s itself when it is
// printable ASCII holding no "=?", else RFC 2047 "B" encoded words of its
// bytes (UTF-8, at most 45 bytes a word, split between runes), which
// DecodeHeaderText turns back into s exactly.
func EncodeHeaderText(s string) string {
	if !needsWords(s) {
		return s
	}
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
// printable ASCII, or "=?", which would be read as the start of a word.
func needsWords(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return true
		}
	}
	return strings.Contains(s, "=?")
}
