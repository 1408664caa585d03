package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

// segmentDoubt is a write of the lease whose outcome is unknown
// (client.InDoubtAfter: it may have been admitted). The lease file keeps it,
// and the next write settles it before it takes a segment from the receipt
// that decides it (client.SegmentReceipt, as the Go client's Lease does):
// admitted, the numbering moves past it; not admitted, the segment is free;
// still unsettled, only the same write may be sent again, at the same
// segment. That last differs from the Go client's Lease, which then refuses
// every unkeyed commit, the retry of the effect in doubt included: a CLI
// user re-running the same command after exit 3 means a retry of that
// write, and the gateway answers it without a second effect (settleDoubt).
type segmentDoubt struct {
	Segment uint64 `json:"segment"`
	Method  string `json:"method"`
	Target  string `json:"target"` // as receipts record it: objects/STORE/KEY, apis/API/PATH
	// PayloadDigest is the body's "sha256:HEX" as receipts record it; ""
	// for a write without a body or one whose body is not known whole (a
	// stdin upload cut short): then no later write is taken for it.
	PayloadDigest string `json:"payloadDigest,omitempty"`
	HasBody       bool   `json:"hasBody,omitempty"`
	Receipt       string `json:"receipt,omitempty"` // the receipt the uncertain answer named, if any
}

// fencedWrite is a write a verb is about to send, as a receipt records it.
type fencedWrite struct {
	method string // PUT, DELETE, or the API call's method
	target string // objects/STORE/KEY or apis/API/PATH
	// digest returns the body's "sha256:HEX" and whether it is known (a
	// body read from stdin is known only once it was sent whole); nil for
	// a write without a body.
	digest func() (string, bool)
}

// payload returns w's digest ("" unless known), whether it has a body,
// and whether the digest is known.
func (w fencedWrite) payload() (digest string, hasBody, known bool) {
	if w.digest == nil {
		return "", false, true
	}
	d, ok := w.digest()
	if !ok {
		d = ""
	}
	return d, true, ok
}

// isDoubt reports whether w is the write d is in doubt about: the same
// method, target and body, the body known on both sides.
func (w fencedWrite) isDoubt(d *segmentDoubt) bool {
	digest, body, known := w.payload()
	if w.method != d.Method || w.target != d.Target || body != d.HasBody {
		return false
	}
	return !body || known && d.PayloadDigest != "" && digest == d.PayloadDigest
}

// records reports whether receipt r is w's, by the Go client's rule
// (client.RecordsWrite): a body whose digest is not known is no receipt's.
func (w fencedWrite) records(r fencegate.Receipt) bool {
	digest, body, _ := w.payload()
	return client.RecordsWrite(r, w.method, w.target, digest, body)
}

// settleDoubt settles the lease file's segment in doubt, if any, before w
// is sent with segment seg (0: the next), and returns the segment w is to
// be sent with (0: the lease file's next); a zero w (a delegation) is no
// write in doubt, nor recorded by a receipt. The receipt that decides the
// segment is client.SegmentReceipt's (of the lease's fence, else the one the
// uncertain answer named):
//
//   - COMMITTED: the next segment moves past it; w, if the receipt records
//     it, is sent at that segment again, a replay the gateway answers with
//     the first receipt without forwarding anything.
//   - none (not found), FAILED or NOT_APPLIED: the segment is free.
//   - PENDING or UNKNOWN: w is sent at that segment again if it is the
//     write in doubt; any other write is refused (MUTATION_UNKNOWN, naming
//     the receipt), nothing sent, until it settles. The Go client's Lease
//     refuses the retry of the effect in doubt too; fencectl sends it, since
//     the gateway answers the same write at the same segment without a
//     second effect: from the receipt once it is COMMITTED, else
//     MUTATION_UNKNOWN naming it (exit 3 again, the doubt kept) or
//     RESOURCE_BUSY while it is unsettled.
//
// A settled doubt is saved in the lease file before anything is sent.
func settleDoubt(ctx context.Context, c *cmd, lf *leaseFile, seg uint64, w fencedWrite) (uint64, error) {
	d := lf.Doubt
	if d == nil {
		return seg, nil
	}
	best, found, err := c.client.SegmentReceipt(ctx, lf.Lease, d.Segment, d.Receipt)
	if err != nil {
		return 0, err
	}
	same := seg == 0 || seg == d.Segment
	switch {
	case found && best.State == fencegate.ReceiptCommitted:
		lf.Doubt = nil
		lf.NextSegment = max(lf.NextSegment, d.Segment+1)
		if same && w.records(best) {
			seg = d.Segment // a replay: answered with the first receipt
		}
	case found && !best.State.NotApplied():
		if same && w.isDoubt(d) {
			return d.Segment, nil // the write in doubt, again: nothing to save
		}
		why := ""
		if _, body, known := w.payload(); body && !known {
			why = "; a body from stdin cannot be compared before it is sent: give it as a FILE"
		}
		return 0, &fencegate.Error{Code: fencegate.CodeMutationUnknown, ReceiptID: best.ID, Message: fmt.Sprintf(
			"segment %d of lease %s (%s %s) is still %s: nothing else is sent until it settles, and this was not (resend the same write to retry segment %d%s)",
			d.Segment, lf.Lease.Lease, d.Method, d.Target, best.State, d.Segment, why)}
	default:
		lf.Doubt = nil // not admitted: the segment is free
	}
	if err := lf.save(c.g.leaseFile); err != nil {
		return 0, err
	}
	return seg, nil
}

// sent records in the lease file what the answer err to w, sent at seg,
// leaves in doubt, and returns err. A lease file that cannot be written is
// said on stderr: the next write must then be told the segment.
func sent(c *cmd, lf *leaseFile, seg uint64, w fencedWrite, err error) error {
	if !client.InDoubtAfter(err) {
		return err
	}
	digest, body, _ := w.payload()
	lf.Doubt = &segmentDoubt{Segment: seg, Method: w.method, Target: w.target, PayloadDigest: digest, HasBody: body, Receipt: client.ReceiptIDOf(err)}
	if serr := lf.save(c.g.leaseFile); serr != nil {
		fmt.Fprintf(c.errOut, "fencectl: segment %d is in doubt, but the lease file %s could not record it (%v): query receipts before the next write, and give it --segment\n",
			seg, c.g.leaseFile, serr)
	}
	return err
}

// fileDigest returns the "sha256:HEX" of f's whole content, read from its
// start, and leaves f at its start.
func fileDigest(f *os.File) (string, bool) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", false
	}
	h := sha256.New()
	_, err := io.Copy(h, f)
	if _, serr := f.Seek(0, io.SeekStart); err != nil || serr != nil {
		return "", false
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), true
}

// hashingReader hashes what is read through it: its digest is known once
// the body was read to its end. It has no Close: net/http closes a request
// body that has one.
type hashingReader struct {
	r   io.Reader
	h   hash.Hash
	eof bool
}

// Read reads from the body, hashing what it returns.
func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	if err == io.EOF {
		h.eof = true
	}
	return n, err
}

// digest is the body's "sha256:HEX", known once it was read whole.
func (h *hashingReader) digest() (string, bool) {
	if !h.eof {
		return "", false
	}
	return "sha256:" + hex.EncodeToString(h.h.Sum(nil)), true
}
