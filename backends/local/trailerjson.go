package local

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendTrailerJSON appends tr as JSON, byte for byte what json.Marshal
// writes for it (TestTrailerJSONIsWhatJSONMarshalWrites), without its
// reflection and map sorting: the trailer is encoded on every Put.
// Reading goes through json.Unmarshal, so files written either way, by
// any version, read back alike.
func appendTrailerJSON(b []byte, tr trailer) ([]byte, error) {
	if y := tr.Modified.Year(); y < 0 || y > 9999 {
		js, err := json.Marshal(tr) // its error, for a time JSON cannot carry
		return append(b, js...), err
	}
	b = append(b, `{"key":`...)
	b = appendJSONString(b, tr.Key)
	b = append(b, `,"etag":`...)
	b = appendJSONString(b, tr.ETag)
	b = append(b, `,"size":`...)
	b = strconv.AppendInt(b, tr.Size, 10)
	b = append(b, `,"content_type":`...)
	b = appendJSONString(b, tr.ContentType)
	b = append(b, `,"metadata":`...)
	if tr.Metadata == nil {
		b = append(b, "null"...)
	} else {
		keys := make([]string, 0, len(tr.Metadata))
		for k := range tr.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, tr.Metadata[k])
		}
		b = append(b, '}')
	}
	if !tr.Modified.IsZero() {
		b = append(b, `,"modified":"`...)
		b = tr.Modified.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes it: HTML
// characters, U+2028 and U+2029 escaped, invalid UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
