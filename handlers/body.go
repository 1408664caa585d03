package handlers

import (
	"encoding/base64"
	"net/http"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/spool"
)

// spool reads r's body (at most max bytes) through the server's body pool
// (package spool: in memory within the pool's bound and budget, else in a
// file in SpoolDir), computing its SHA-256 as it reads, checks any
// Content-Digest (sha-256) or x-amz-checksum-sha256 the client sent, and
// leaves the body at its start.
func (s *Server) spool(r *http.Request, max int64) (*spool.Body, error) {
	b, err := s.bodies.Read(s.SpoolDir, http.MaxBytesReader(nil, r.Body, max), r.ContentLength, max)
	if err != nil {
		return nil, err
	}
	if err := checkClientDigest(r.Header, b.SHA256); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// checkClientDigest compares every client-declared SHA-256 (each field of
// each header, however many lines carry them) with the computed one: each
// x-amz-checksum-sha256 line, and each sha-256 member of Content-Digest
// (checkContentDigest).
func checkClientDigest(hd http.Header, sum []byte) error {
	for _, v := range hd.Values("x-amz-checksum-sha256") {
		if v == "" {
			continue // an empty line declares nothing (as before every line was read)
		}
		want, err := base64.StdEncoding.DecodeString(v)
		if err != nil || string(want) != string(sum) {
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "x-amz-checksum-sha256 does not match the body")
		}
	}
	return checkContentDigest(hd.Values("Content-Digest"), sum)
}

// emptyDigest is the payload digest of a request without a body.
const emptyDigest = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
