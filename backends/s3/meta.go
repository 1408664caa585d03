package s3

import (
	"maps"
	"mime"
)

// Object metadata travels in x-amz-meta-* headers, which S3's REST API takes
// in US-ASCII only. Amazon S3 decodes values sent as RFC 2047 encoded words
// before storing them and answers non-ASCII values encoded the same way
// ("Working with object metadata", user-defined metadata, in the Amazon S3
// User Guide); other stores (versitygw) keep the words as sent. So a value
// that is not printable ASCII (a non-ASCII operation ID or root, a client's
// own non-ASCII metadata) is sent as UTF-8 "B" encoded words, and every
// value read back is decoded, which gives the same text from either kind
// of store. Printable ASCII values go as they are. Amazon S3 counts the
// decoded bytes against its 2 KB of user metadata (what
// fencegate.MaxEffectMetaSize bounds); a store that keeps the words counts
// them encoded, about 1.7 times the bytes of non-ASCII text.

// encodeMeta is md as it is sent: each value that needs it as RFC 2047
// encoded words (mime.BEncoding leaves printable ASCII unchanged). md is
// not modified.
func encodeMeta(md map[string]string) map[string]string {
	return mapValues(md, func(v string) string { return mime.BEncoding.Encode("UTF-8", v) })
}

// decodeMeta is md as it was written: encoded words decoded (a value that
// is not a well-formed one is kept as it came). md is not modified.
func decodeMeta(md map[string]string) map[string]string {
	var dec mime.WordDecoder
	return mapValues(md, func(v string) string {
		if d, err := dec.DecodeHeader(v); err == nil {
			return d
		}
		return v
	})
}

// mapValues is md with f applied to each value: md itself when f changes
// none, else a copy.
func mapValues(md map[string]string, f func(string) string) map[string]string {
	var out map[string]string
	for k, v := range md {
		nv := f(v)
		if nv == v {
			continue
		}
		if out == nil {
			out = maps.Clone(md)
		}
		out[k] = nv
	}
	if out == nil {
		return md
	}
	return out
}
