package handlers

import (
	"strings"

	"github.com/dunglas/httpsfv"

	"github.com/fencegate/fencegate"
)

// checkContentDigest checks the Content-Digest field of a request against
// the body's SHA-256 (sum).
//
// Content-Digest is an RFC 8941 Dictionary whose keys name hashing
// algorithms and whose values are Byte Sequences (RFC 9530 section 2; RFC
// 8941 sections 3.2 and 3.3.5). Its field lines are combined with commas
// before parsing (RFC 8941 section 4.2, RFC 9110 section 5.3), so several
// Content-Digest lines are one Dictionary. Where RFC 8941 section 4.2 lets a
// recipient ignore a field that fails to parse, RFC 9530 section 2 lets local
// policy constrain how digests are processed, and here a declared digest is
// never silently dropped:
//   - a field that does not parse as a Dictionary is INVALID_REQUEST;
//   - a sha-256 member whose value is not a Byte Sequence is INVALID_REQUEST;
//   - a sha-256 member's parameters are ignored (RFC 8941 section 3.2 allows
//     parameters on every member; RFC 9530 defines none);
//   - every sha-256 member must match the body: a key given twice would,
//     by RFC 8941 section 4.2.2, keep only its last value, so the members are
//     read one by one and two sha-256 values that differ are refused, one of
//     them being wrong;
//   - members of other algorithms (sha-512, and the deprecated ones of RFC
//     9530 section 5) are ignored: "A recipient MAY ignore any or all
//     digests" (RFC 9530 section 2), and a sender may send digests of several
//     algorithms for recipients of different capabilities.
//
// Empty lines are left out before the lines are combined: an empty line
// declares nothing, as an empty x-amz-checksum-sha256 line does not.
func checkContentDigest(lines []string, sum []byte) error {
	var field []string
	for _, l := range lines {
		if strings.Trim(l, " \t") != "" {
			field = append(field, l)
		}
	}
	if len(field) == 0 {
		return nil
	}
	if _, err := httpsfv.UnmarshalDictionary(field); err != nil {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "Content-Digest is not a structured-field Dictionary (RFC 9530 section 2): %v", err)
	}
	for _, m := range dictionaryMembers(strings.Join(field, ",")) {
		d, err := httpsfv.UnmarshalDictionary([]string{m})
		if err != nil || len(d.Names()) != 1 { // cannot happen once the whole field parsed
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "Content-Digest member %q does not parse", m)
		}
		if d.Names()[0] != "sha-256" {
			continue
		}
		v, _ := d.Get("sha-256")
		item, ok := v.(httpsfv.Item)
		want, isBytes := item.Value.([]byte)
		if !ok || !isBytes {
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "Content-Digest sha-256 is not a Byte Sequence (sha-256=:<base64>:)")
		}
		if string(want) != string(sum) {
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "Content-Digest sha-256 does not match the body")
		}
	}
	return nil
}

// dictionaryMembers splits a field that has parsed as an RFC 8941
// Dictionary into its members' texts, each trimmed of optional whitespace.
// In such a field a comma outside a String or a Display String only
// separates members (section 3.2): keys, Tokens, Byte Sequences, numbers,
// parameters and Inner Lists (space-separated) contain none. A String
// escapes '"' and '\' with '\' (RFC 8941 section 3.3.3); a Display String
// (%"...", RFC 9651 section 3.3.8, which the parser takes) escapes with
// percent-encoding, so a backslash in it is a character, and a '"' after a
// '%' outside quotes can only open one (a Token cannot be followed by '"').
func dictionaryMembers(field string) []string {
	var members []string
	start := 0
	var in byte // 0 outside quotes, 's' in a String, 'd' in a Display String
	for i := 0; i < len(field); i++ {
		switch c := field[i]; {
		case in == 0 && c == '"':
			in = 's'
			if i > 0 && field[i-1] == '%' {
				in = 'd'
			}
		case in == 's' && c == '\\':
			i++ // the escaped character
		case in != 0 && c == '"':
			in = 0
		case in == 0 && c == ',':
			members = append(members, strings.Trim(field[start:i], " \t"))
			start = i + 1
		}
	}
	return append(members, strings.Trim(field[start:], " \t"))
}
