package s3door

import (
	"encoding/xml"
	"io"
	"net/http"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// DeleteObjects (https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObjects.html):
// each key is its own fenced DeleteObject through the acceptance point, in
// the order given; a refused key is reported in the answer's <Error> list
// with its S3 code and the Fencegate code in its message, and the others
// go on. Versioned deletes are NotImplemented.
//
// Conditions are NotImplemented, never dropped: a conditional header on the
// batch (If-Match, ..., refused by headersAllowed as for DeleteObject), and
// an <Object>'s own <ETag>, <LastModifiedTime> or <Size>, which S3 applies
// to that key alone (https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-deletes.html,
// ObjectIdentifier in the API reference). The gateway's delete effect
// carries only its own chain condition (gateway.ObjectDelete deletes under
// the receipt's previous version), so a client's condition could not be
// kept. S3 reports a failed per-key condition as that key's <Error>; here
// a key's unsupported condition refuses the whole request before any key
// is deleted, as a versioned key does: a client that asked for a
// conditional delete gets no unconditional one, for that key or the others
// it may have meant to delete only together with it.

type deleteRequest struct {
	Quiet   bool `xml:"Quiet"`
	Objects []struct {
		Key       string `xml:"Key"`
		VersionID string `xml:"VersionId"`
		// The conditions S3 allows on one key; present (even empty) means
		// asked for.
		ETag             *string `xml:"ETag"`
		LastModifiedTime *string `xml:"LastModifiedTime"`
		Size             *string `xml:"Size"`
	} `xml:"Object"`
}

type deleteResult struct {
	XMLName xml.Name      `xml:"DeleteResult"`
	NS      string        `xml:"xmlns,attr"`
	Deleted []deletedKey  `xml:"Deleted"`
	Errors  []deleteError `xml:"Error"`
}

type deletedKey struct {
	Key string `xml:"Key"`
}

type deleteError struct {
	Key     string `xml:"Key"`
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

func (s *Server) deleteObjects(w http.ResponseWriter, r *http.Request, t *target) error {
	bucket, st := t.bucket, t.st
	if err := queryAllowed(r, "DeleteObjects", "delete"); err != nil {
		return err
	}
	if err := headersAllowed(r); err != nil {
		return err
	}
	doc, err := s.document(r, true)
	if err != nil {
		return err
	}
	defer doc.Close()
	var dr deleteRequest
	if err := xml.NewDecoder(io.LimitReader(doc.Reader(), 2<<20)).Decode(&dr); err != nil || len(dr.Objects) == 0 || len(dr.Objects) > 1000 {
		return s3err(http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema.")
	}
	out := deleteResult{NS: s3NS}
	for _, o := range dr.Objects {
		if o.VersionID != "" {
			return notImplemented("versioned DeleteObjects")
		}
		if o.ETag != nil || o.LastModifiedTime != nil || o.Size != nil {
			return notImplemented("DeleteObjects with a per-object condition (ETag, LastModifiedTime, Size)")
		}
	}
	a := authOf(r)
	for _, o := range dr.Objects {
		err := fencegate.CheckName(bucket + "/" + o.Key)
		var req gateway.Request
		if err == nil {
			req = gateway.Request{Caller: a.cred.Identity, GrantToken: a.cred.Grant, StatusToken: a.cred.Status,
				Method: http.MethodDelete, Resource: fencegate.ObjectResource(bucket, o.Key),
				Target: fencegate.ObjectTarget(bucket, o.Key), AssignSegment: true, PayloadDigest: emptyDigest,
				Effect: gateway.ObjectDelete{Store: st, Key: o.Key}}
			_, err = s.Gateway.Apply(r.Context(), req)
		}
		if err != nil {
			status, code, msg, _ := answerOf(err)
			s.refused(r, err, status, code, msg, "key", o.Key)
			out.Errors = append(out.Errors, deleteError{Key: o.Key, Code: code, Message: msg})
			continue
		}
		if !dr.Quiet {
			out.Deleted = append(out.Deleted, deletedKey{Key: o.Key})
		}
	}
	writeXML(w, http.StatusOK, out)
	return nil
}
