package client

import (
	"context"
	"io"
	"net/http"
	"strconv"

	"github.com/fencegate/fencegate/domain"
)

// Fence is what a fenced mutation carries besides the workload credential:
// the grant, a status proof (empty for gateways in query mode), the segment
// number (1, 2, 3, ... under one grant) and optionally the worker's own key
// for the effect (Fence-Effect-Key, kept in the receipt).
type Fence struct {
	Grant     string
	Status    string
	Segment   uint64
	EffectKey string
	// Delegation, when set, is the owner's signed delegation
	// (Fence-Delegation): the caller writes as the delegate it names, and
	// Status must be a proof issued for it (DelegationStatus).
	Delegation string
}

func (f Fence) header() http.Header {
	h := http.Header{}
	h.Set("Fence-Grant", f.Grant)
	if f.Status != "" {
		h.Set("Fence-Status", f.Status)
	}
	h.Set("Fence-Segment", strconv.FormatUint(f.Segment, 10))
	if f.EffectKey != "" {
		h.Set("Fence-Effect-Key", f.EffectKey)
	}
	if f.Delegation != "" {
		h.Set("Fence-Delegation", f.Delegation)
	}
	return h
}

// ObjectInfo describes an object read through the gateway, with the fence
// metadata the effect carries when it was written through Fencegate.
type ObjectInfo struct {
	ContentType string
	Size        int64
	ETag        string
	FenceToken  uint64
	Segment     uint64
	Root        string
	OperationID string
	Receipt     string
}

func objectPath(store, key string) string {
	return "/v1/objects/" + escapePath(store) + "/" + escapePath(key)
}

// PutObject is one fenced PUT /v1/objects/{store}/{key}. The answer is the
// receipt; a replay of an accepted segment answers the original receipt.
func (c *Client) PutObject(ctx context.Context, store, key string, f Fence, body io.Reader, contentType string) (domain.Receipt, error) {
	h := f.header()
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	var rc domain.Receipt
	err := c.do(ctx, request{op: "put object", method: "PUT", path: objectPath(store, key), header: h, body: body}, &rc)
	return rc, err
}

// DeleteObject is one fenced DELETE /v1/objects/{store}/{key}.
func (c *Client) DeleteObject(ctx context.Context, store, key string, f Fence) (domain.Receipt, error) {
	var rc domain.Receipt
	err := c.do(ctx, request{op: "delete object", method: "DELETE", path: objectPath(store, key), header: f.header()}, &rc)
	return rc, err
}

// GetObject reads an object; the caller closes the body.
func (c *Client) GetObject(ctx context.Context, store, key string) (io.ReadCloser, ObjectInfo, error) {
	resp, err := c.send(ctx, request{op: "get object", method: "GET", path: objectPath(store, key)})
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, ObjectInfo{}, answerError("get object", resp)
	}
	h := resp.Header
	info := ObjectInfo{
		ContentType: h.Get("Content-Type"), Size: resp.ContentLength, ETag: h.Get("ETag"),
		Root: domain.DecodeHeaderText(h.Get("Fence-Root")), OperationID: domain.DecodeHeaderText(h.Get("Fence-Operation-Id")), Receipt: h.Get("Fence-Receipt"),
	}
	info.FenceToken, _ = strconv.ParseUint(h.Get("Fence-Token"), 10, 64)
	info.Segment, _ = strconv.ParseUint(h.Get("Fence-Segment"), 10, 64)
	return resp.Body, info, nil
}
