package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"

	"github.com/fencegate/fencegate/domain"
)

// ObjectWriter writes objects of one store under a lease, one segment per
// commit. Every commit carries the lease's grant and a fresh status proof;
// numbering is shared by all writers of the lease.
type ObjectWriter struct {
	l     *Lease
	store string
}

// Objects returns a writer for objects of store under l.
func (l *Lease) Objects(store string) *ObjectWriter { return &ObjectWriter{l: l, store: store} }

// Put writes body to key as the next segment. A retry of a Put whose outcome
// was unknown reuses the committed receipt instead of writing again. body is
// read once to identify the effect and rewound before each send.
func (w *ObjectWriter) Put(ctx context.Context, key string, body io.ReadSeeker, contentType string) (domain.Receipt, error) {
	h := sha256.New()
	if _, err := io.Copy(h, body); err != nil {
		return domain.Receipt{}, domain.Wrap(err, domain.CodeInvalidRequest, "read body")
	}
	o, err := w.l.commit(ctx, newEffect("PUT", domain.ObjectTarget(w.store, key), hex.EncodeToString(h.Sum(nil)), func(ctx context.Context, f Fence) (outcome, error) {
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return outcome{}, domain.Wrap(err, domain.CodeInvalidRequest, "rewind body")
		}
		r, err := w.l.c.PutObject(ctx, w.store, key, f, body, contentType)
		return outcome{receipt: r}, err
	}))
	return o.receipt, err
}

// Delete deletes key as the next segment.
func (w *ObjectWriter) Delete(ctx context.Context, key string) (domain.Receipt, error) {
	o, err := w.l.commit(ctx, newEffect("DELETE", domain.ObjectTarget(w.store, key), "", func(ctx context.Context, f Fence) (outcome, error) {
		r, err := w.l.c.DeleteObject(ctx, w.store, key, f)
		return outcome{receipt: r}, err
	}))
	return o.receipt, err
}

// APIWriter makes fenced calls to one fronted API under a lease, one segment
// per call, with the same guarantees as ObjectWriter.
type APIWriter struct {
	l   *Lease
	api string
}

// API returns a writer for calls to the fronted API named api under l.
func (l *Lease) API(api string) *APIWriter { return &APIWriter{l: l, api: api} }

// Call sends METHOD path with body as the next segment. A retry of a call
// whose outcome was unknown returns the stored upstream answer of the
// committed receipt (Replay true) instead of calling again.
func (w *APIWriter) Call(ctx context.Context, method, path string, body []byte, contentType string) (*APIResponse, error) {
	sum := sha256.Sum256(body)
	o, err := w.l.commit(ctx, newEffect(method, domain.APITarget(w.api, path), hex.EncodeToString(sum[:]), func(ctx context.Context, f Fence) (outcome, error) {
		r, err := w.l.c.CallAPI(ctx, w.api, method, path, f, body, contentType)
		return outcome{api: r}, err
	}))
	return o.api, err
}
