package s3

import (
	"maps"

	"github.com/fencegate/fencegate"
)

// Object metadata travels in x-amz-meta-* headers, which S3's REST API takes
// in US-ASCII only. Amazon S3 decodes values sent as RFC 2047 encoded words
// before storing them and answers non-ASCII values encoded the same way
// ("Working with object metadata", user-defined metadata, in the Amazon S3
// User Guide); other stores (versitygw) keep the words as sent. So a value
// that is not printable ASCII (a non-ASCII operation ID or root, a client's
// own non-ASCII metadata) is sent as UTF-8 "B" encoded words
// (fencegate.EncodeMetaText), and every value read back is decoded, which
// gives the text that was written from either kind of store. A value that
// is itself encoded words stands for the text they encode, as on Amazon S3,
// which decodes it when it is stored. Amazon
// S3 counts the decoded bytes against its 2 KB of user metadata (what
// fencegate.MaxEffectMetaSize bounds); a store that keeps the words counts
// them encoded, about 1.7 times the bytes of non-ASCII text.

// encodeMeta is md as it is sent (md is not modified).
func encodeMeta(md map[string]string) map[string]string {
	return mapValues(md, fencegate.EncodeMetaText)
}

// decodeMeta is md as it was written (md is not modified).
func decodeMeta(md map[string]string) map[string]string {
	return mapValues(md, fencegate.DecodeHeaderText)
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
