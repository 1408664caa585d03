package s3door

import (
	"encoding/base64"
	"encoding/xml"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
)

// Bucket-level operations: ListBuckets, HeadBucket, GetBucketLocation,
// ListObjectsV2 and ListObjects (v1), CreateBucket of a configured store
// (BucketAlreadyOwnedByYou, which clients such as rclone take as success),
// and DeleteObjects. Anything else on a bucket is NotImplemented.
// Response shapes: https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html,
// .../API_ListBuckets.html.

const s3NS = "http://s3.amazonaws.com/doc/2006-03-01/"

type owner struct {
	ID          string `xml:"ID"`
	DisplayName string `xml:"DisplayName"`
}

type listBucketsResult struct {
	XMLName xml.Name `xml:"ListAllMyBucketsResult"`
	NS      string   `xml:"xmlns,attr"`
	Owner   owner    `xml:"Owner"`
	Buckets []bucket `xml:"Buckets>Bucket"`
}

type bucket struct {
	Name         string `xml:"Name"`
	CreationDate string `xml:"CreationDate"`
}

// epoch stands for times the stores do not know (a bucket's creation).
var epoch = time.Unix(0, 0).UTC().Format(time.RFC3339)

func (s *Server) listBuckets(w http.ResponseWriter, r *http.Request, _ *target) error {
	if err := queryAllowed(r, "ListBuckets"); err != nil {
		return err
	}
	a := authOf(r)
	out := listBucketsResult{NS: s3NS, Owner: owner{ID: a.cred.Identity, DisplayName: a.cred.Identity}}
	for name := range s.Stores {
		out.Buckets = append(out.Buckets, bucket{Name: name, CreationDate: epoch})
	}
	sort.Slice(out.Buckets, func(i, j int) bool { return out.Buckets[i].Name < out.Buckets[j].Name })
	writeXML(w, http.StatusOK, out)
	return nil
}

func (s *Server) headBucket(w http.ResponseWriter, r *http.Request, _ *target) error {
	if err := queryAllowed(r, "HeadBucket"); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) bucketLocation(w http.ResponseWriter, r *http.Request, _ *target) error {
	if err := queryAllowed(r, "GetBucketLocation", "location"); err != nil {
		return err
	}
	writeXML(w, http.StatusOK, struct {
		XMLName xml.Name `xml:"LocationConstraint"`
		NS      string   `xml:"xmlns,attr"`
	}{NS: s3NS})
	return nil
}

// createBucket answers CreateBucket of a configured store (the only
// buckets there are): BucketAlreadyOwnedByYou, which clients such as
// rclone take as success. With any subresource it is NotImplemented.
func (s *Server) createBucket(w http.ResponseWriter, r *http.Request, t *target) error {
	if err := queryAllowed(r, "CreateBucket"); err != nil {
		return err
	}
	return s3err(http.StatusConflict, "BucketAlreadyOwnedByYou", "the bucket is the gateway's configured store "+t.bucket)
}

type listResult struct {
	XMLName               xml.Name       `xml:"ListBucketResult"`
	NS                    string         `xml:"xmlns,attr"`
	Name                  string         `xml:"Name"`
	Prefix                string         `xml:"Prefix"`
	Delimiter             string         `xml:"Delimiter,omitempty"`
	MaxKeys               int            `xml:"MaxKeys"`
	EncodingType          string         `xml:"EncodingType,omitempty"`
	IsTruncated           bool           `xml:"IsTruncated"`
	KeyCount              *int           `xml:"KeyCount,omitempty"`
	ContinuationToken     string         `xml:"ContinuationToken,omitempty"`
	NextContinuationToken string         `xml:"NextContinuationToken,omitempty"`
	StartAfter            string         `xml:"StartAfter,omitempty"`
	Marker                *string        `xml:"Marker,omitempty"`
	NextMarker            string         `xml:"NextMarker,omitempty"`
	Contents              []listObject   `xml:"Contents"`
	CommonPrefixes        []commonPrefix `xml:"CommonPrefixes"`
}

type listObject struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int64  `xml:"Size"`
	StorageClass string `xml:"StorageClass"`
	Owner        *owner `xml:"Owner,omitempty"`
}

type commonPrefix struct {
	Prefix string `xml:"Prefix"`
}

// listObjects answers ListObjectsV2 (list-type=2) and ListObjects (v1).
// Keys the caller may not read are left out. With a delimiter, keys are
// rolled up into common prefixes; the continuation token (v2) and the next
// marker (v1) name the last key or prefix answered.
func (s *Server) listObjects(w http.ResponseWriter, r *http.Request, t *target) error {
	name, st := t.bucket, t.st
	q := r.URL.Query()
	v2 := q.Get("list-type") == "2"
	if err := queryAllowed(r, "ListObjects", "list-type", "prefix", "delimiter", "max-keys", "continuation-token",
		"start-after", "encoding-type", "fetch-owner", "marker"); err != nil {
		return err
	}
	if lt := q.Get("list-type"); lt != "" && lt != "2" {
		return notImplemented("list-type " + lt)
	}
	lister, ok := st.(fencegate.ObjectLister)
	if !ok {
		return notImplemented("listing store " + name)
	}
	enc := q.Get("encoding-type")
	if enc != "" && enc != "url" {
		return s3err(http.StatusBadRequest, "InvalidArgument", "Invalid Encoding Method specified in Request")
	}
	maxKeys := 1000
	if v := q.Get("max-keys"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return s3err(http.StatusBadRequest, "InvalidArgument", "max-keys must be a non-negative integer")
		}
		maxKeys = min(n, 1000)
	}
	prefix, delim := q.Get("prefix"), q.Get("delimiter")
	after := q.Get("marker")
	// A marker (v1) or continuation token (v2) that is a common prefix of
	// this listing resumes after everything under it (rolledUp); v2's
	// start-after is a key.
	resumed := !v2 // after a marker or a token, not a start-after
	if v2 {
		after = q.Get("start-after")
		if tok := q.Get("continuation-token"); tok != "" {
			b, err := base64.RawURLEncoding.DecodeString(tok)
			if err != nil {
				return s3err(http.StatusBadRequest, "InvalidArgument", "The continuation token provided is incorrect")
			}
			after, resumed = string(b), true
		}
	}
	skipUnder := ""
	if resumed && rolledUp(after, prefix, delim) {
		skipUnder = after
	}
	a := authOf(r)
	esc := func(s string) string {
		if enc == "url" {
			return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
		}
		return s
	}
	out := listResult{NS: s3NS, Name: name, Prefix: esc(prefix), Delimiter: esc(delim), MaxKeys: maxKeys, EncodingType: enc}
	last, count := "", 0
	for count < maxKeys {
		objs, more, err := lister.List(r.Context(), prefix, after, 1000)
		if err != nil {
			return err
		}
		for _, o := range objs {
			after = o.Key
			if skipUnder != "" && strings.HasPrefix(o.Key, skipUnder) {
				continue
			}
			if !s.mayRead(a.cred.Identity, fencegate.ObjectResource(name, o.Key)) {
				continue
			}
			if delim != "" {
				if i := strings.Index(o.Key[len(prefix):], delim); i >= 0 {
					cp := o.Key[:len(prefix)+i+len(delim)]
					if len(out.CommonPrefixes) == 0 || out.CommonPrefixes[len(out.CommonPrefixes)-1].Prefix != esc(cp) {
						if count == maxKeys {
							out.IsTruncated = true
							break
						}
						out.CommonPrefixes = append(out.CommonPrefixes, commonPrefix{esc(cp)})
						count++
					}
					last = cp
					continue
				}
			}
			if count == maxKeys {
				out.IsTruncated = true
				break
			}
			lo := listObject{Key: esc(o.Key), ETag: quoteETag(o.ETag), Size: o.Size, StorageClass: "STANDARD",
				LastModified: o.LastModified.UTC().Format("2006-01-02T15:04:05.000Z")}
			if !v2 || q.Get("fetch-owner") == "true" {
				lo.Owner = &owner{ID: a.cred.Identity, DisplayName: a.cred.Identity}
			}
			out.Contents = append(out.Contents, lo)
			last = o.Key
			count++
		}
		if out.IsTruncated || !more {
			if more && count == maxKeys {
				out.IsTruncated = true
			}
			break
		}
	}
	if out.IsTruncated {
		if v2 {
			out.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(last))
		} else {
			out.NextMarker = esc(last)
		}
	}
	if v2 {
		out.KeyCount = &count
		out.ContinuationToken = q.Get("continuation-token")
		out.StartAfter = esc(q.Get("start-after"))
	} else {
		m := esc(q.Get("marker"))
		out.Marker = &m
	}
	writeXML(w, http.StatusOK, out)
	return nil
}

// rolledUp reports whether entry is a common prefix of a listing of prefix
// with delim: past prefix, the delimiter's first occurrence ends it. Such
// an entry is never answered as a key (a key of that shape is rolled up
// into it), so a page's last entry, a key or a common prefix, is known from
// itself; a key equal to the prefix, or one whose delimiter straddles the
// prefix, is a key.
func rolledUp(entry, prefix, delim string) bool {
	if delim == "" || !strings.HasPrefix(entry, prefix) {
		return false
	}
	i := strings.Index(entry[len(prefix):], delim)
	return i >= 0 && len(prefix)+i+len(delim) == len(entry)
}
