package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

// segmentDoubt is a write of the lease whose outcome is unknown (no intact
// answer, MUTATION_UNKNOWN or INTERNAL: it may have been admitted). The
// lease file keeps it, and the next write settles it from the operation's
// receipts before it takes a segment, as the Go client's Lease does
// (client/segment.go, settleDoubt): admitted, the numbering moves past it;
// not admitted, the segment is free; still unsettled, only the same write
// may be sent again, at the same segment.
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

// objectTarget is the receipt target of KEY in STORE (client/segment.go).
func objectTarget(store, key string) string { return "objects/" + store + "/" + key }

// apiTarget is the receipt target of a call of path on api (client/segment.go).
func apiTarget(api, path string) string { return "apis/" + api + "/" + strings.TrimPrefix(path, "/") }

// payload returns w's digest, whether it has a body, and whether the
// digest is known.
func (w fencedWrite) payload() (digest string, hasBody, known bool) {
	if w.digest == nil {
		return "", false, true
	}
	d, ok := w.digest()
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

// records reports whether receipt r is w's: the same method and target
// and, for a write with a body, the same payload digest (known).
func (w fencedWrite) records(r fencegate.Receipt) bool {
	digest, body, known := w.payload()
	return r.Method == w.method && r.Target == w.target && (!body || known && r.PayloadDigest == digest)
}

// inDoubtAfter reports whether a write answered err may have been admitted
// (client/segment.go, inDoubtAfter): no intact answer, MUTATION_UNKNOWN, or
// INTERNAL, which implies nothing about the request.
func inDoubtAfter(err error) bool {
	code := fencegate.ErrorCode(err)
	return client.IsUncertain(err) || code == fencegate.CodeMutationUnknown || code == fencegate.CodeInternal
}

// settleDoubt settles the lease file's segment in doubt, if any, before w
// is sent with segment seg (0: the next), and returns the segment w is to
// be sent with (0: the lease file's next); a zero w (a delegation) is no
// write in doubt, nor recorded by a receipt. It reads the operation's
// receipts for the segment (and the receipt the uncertain answer named):
//
//   - COMMITTED: the next segment moves past it; w, if the receipt records
//     it, is sent at that segment again, a replay the gateway answers with
//     the first receipt without forwarding anything.
//   - none, FAILED or NOT_APPLIED: the segment is free.
//   - PENDING or UNKNOWN: w is sent at that segment again if it is the
//     write in doubt; any other write is refused (MUTATION_UNKNOWN, naming
//     the receipt), nothing sent, until it settles.
//
// A settled doubt is saved in the lease file before anything is sent.
func settleDoubt(ctx context.Context, c *cmd, lf *leaseFile, seg uint64, w fencedWrite) (uint64, error) {
	d := lf.Doubt
	if d == nil {
		return seg, nil
	}
	best, err := doubtReceipt(ctx, c, lf)
	if err != nil {
		return 0, err
	}
	same := seg == 0 || seg == d.Segment
	switch {
	case best != nil && best.State == fencegate.ReceiptCommitted:
		lf.Doubt = nil
		lf.NextSegment = max(lf.NextSegment, d.Segment+1)
		if same && w.records(*best) {
			seg = d.Segment // a replay: answered with the first receipt
		}
	case best != nil && !best.State.NotApplied():
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

// doubtReceipt is the receipt of the lease file's segment in doubt that
// says most (COMMITTED over in flight over not applied), nil if there is
// none: the operation's receipts of the lease's fence at that segment, else
// the receipt the uncertain answer named.
func doubtReceipt(ctx context.Context, c *cmd, lf *leaseFile) (*fencegate.Receipt, error) {
	d, info := lf.Doubt, lf.Lease
	list, err := c.client.Receipts(ctx, info.OperationID)
	if err != nil {
		return nil, err
	}
	var best *fencegate.Receipt
	for i := range list {
		r := &list[i]
		if r.Lease != info.Lease || r.FenceToken != info.FenceToken || r.Segment != d.Segment {
			continue
		}
		if best == nil || rank(r.State) > rank(best.State) {
			best = r
		}
	}
	if best == nil && d.Receipt != "" {
		r, err := c.client.Receipt(ctx, d.Receipt)
		if err != nil && fencegate.ErrorCode(err) != fencegate.CodeNotFound {
			return nil, err
		}
		if err == nil {
			best = &r
		}
	}
	return best, nil
}

// rank orders receipt states for settling a doubt: COMMITTED wins over in
// flight, which wins over not applied.
func rank(s fencegate.ReceiptState) int {
	switch s {
	case fencegate.ReceiptCommitted:
		return 2
	case fencegate.ReceiptPending, fencegate.ReceiptUnknown:
		return 1
	}
	return 0
}

// sent records in the lease file what the answer err to w, sent at seg,
// leaves in doubt, and returns err. A lease file that cannot be written is
// said on stderr: the next write must then be told the segment.
func sent(c *cmd, lf *leaseFile, seg uint64, w fencedWrite, err error) error {
	if !inDoubtAfter(err) {
		return err
	}
	digest, body, known := w.payload()
	if !known {
		digest = ""
	}
	var fe *fencegate.Error
	receipt := ""
	if errors.As(err, &fe) {
		receipt = fe.ReceiptID
	}
	lf.Doubt = &segmentDoubt{Segment: seg, Method: w.method, Target: w.target, PayloadDigest: digest, HasBody: body, Receipt: receipt}
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
