package s3door

import (
	"net/http"
	"strings"

	"github.com/fencegate/fencegate"
)

// Level is where in the path-style namespace an operation acts.
type Level int

// Levels of an S3 request's path.
const (
	// LevelService is "/" (ListBuckets).
	LevelService Level = iota
	// LevelBucket is "/BUCKET" or "/BUCKET/".
	LevelBucket
	// LevelObject is "/BUCKET/KEY".
	LevelObject
)

// Operation is one S3 operation the front door serves. Operations is the
// only table the dispatcher matches requests against, so an operation the
// front door serves is exactly an entry here, and the route-coverage test
// (internal/app TestEveryS3MutationIsFenced) walks this same table: an entry
// it has no case for fails it, and so does an entry that changes state
// without saying Mutates, or says Mutates and is not refused by the
// acceptance point under a superseded, foreign or missing credential.
type Operation struct {
	// Name is S3's name of the operation (PutObject, ...).
	Name   string
	Method string
	Level  Level
	// Query is the query parameter that selects the operation among those
	// of its method and level ("" for the one selected by none).
	Query string
	// Mutates: the operation changes an object of a store; it must do so
	// only through gateway.Gateway.Apply (grant, status, owner, fence and
	// segment rule, receipt).
	Mutates bool
	// Stages: the operation prepares a later mutation (a multipart upload's
	// create and parts); it must be refused for a grant that is not HELD or
	// already superseded (gateway.Gateway.Admissible), and changes no store.
	Stages bool
	// Discards: the operation throws away what a step staged (an upload's
	// abort) and changes no store; the lease that staged it may do it after
	// it ended, so that its staged bytes need not wait for the idle sweep.
	Discards bool

	serve func(s *Server, w http.ResponseWriter, r *http.Request, t *target) error
}

// target is what a request's path names: a store (bucket) and a key.
type target struct {
	bucket string
	key    string // "" at the bucket and service levels
	st     fencegate.ObjectStore
}

// Operations is every S3 operation the front door serves, in match order
// (an operation selected by a query parameter before the one selected by
// none). Anything that matches no entry is NotImplemented.
var Operations = []Operation{
	{Name: "ListBuckets", Method: http.MethodGet, Level: LevelService, serve: (*Server).listBuckets},

	{Name: "HeadBucket", Method: http.MethodHead, Level: LevelBucket, serve: (*Server).headBucket},
	{Name: "GetBucketLocation", Method: http.MethodGet, Level: LevelBucket, Query: "location", serve: (*Server).bucketLocation},
	{Name: "ListObjects", Method: http.MethodGet, Level: LevelBucket, serve: (*Server).listObjects},
	{Name: "CreateBucket", Method: http.MethodPut, Level: LevelBucket, serve: (*Server).createBucket},
	{Name: "DeleteObjects", Method: http.MethodPost, Level: LevelBucket, Query: "delete", Mutates: true, serve: (*Server).deleteObjects},

	{Name: "UploadPart", Method: http.MethodPut, Level: LevelObject, Query: "uploadId", Stages: true, serve: (*Server).uploadPart},
	{Name: "PutObject", Method: http.MethodPut, Level: LevelObject, Mutates: true, serve: (*Server).putObject},
	{Name: "CreateMultipartUpload", Method: http.MethodPost, Level: LevelObject, Query: "uploads", Stages: true, serve: (*Server).createUpload},
	{Name: "CompleteMultipartUpload", Method: http.MethodPost, Level: LevelObject, Query: "uploadId", Mutates: true, serve: (*Server).completeUpload},
	{Name: "AbortMultipartUpload", Method: http.MethodDelete, Level: LevelObject, Query: "uploadId", Discards: true, serve: (*Server).abortUpload},
	{Name: "DeleteObject", Method: http.MethodDelete, Level: LevelObject, Mutates: true, serve: (*Server).deleteObject},
	{Name: "ListParts", Method: http.MethodGet, Level: LevelObject, Query: "uploadId", serve: (*Server).listParts},
	{Name: "GetObject", Method: http.MethodGet, Level: LevelObject, serve: (*Server).getObject},
	{Name: "HeadObject", Method: http.MethodHead, Level: LevelObject, serve: (*Server).getObject},
}

// levelOf is the level of a path-style request path.
func levelOf(path string) Level {
	p := strings.TrimPrefix(path, "/")
	switch {
	case p == "":
		return LevelService
	case !strings.Contains(strings.TrimSuffix(p, "/"), "/"):
		return LevelBucket
	}
	return LevelObject
}

// operationOf is the operation r asks for, or nil.
func operationOf(r *http.Request) *Operation {
	level, q := levelOf(r.URL.Path), r.URL.Query()
	for i := range Operations {
		op := &Operations[i]
		if op.Method == r.Method && op.Level == level && (op.Query == "" || q.Has(op.Query)) {
			return op
		}
	}
	return nil
}
