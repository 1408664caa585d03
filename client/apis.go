package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/fencegate/fencegate/domain"
)

// APIResponse is the answer of a fenced API call: the upstream's first answer
// (any status), as stored in the receipt, with the receipt's ID.
type APIResponse struct {
	Status  int
	Header  http.Header
	Body    []byte
	Receipt string
	// Replay: the segment had been accepted before; upstream was not called again.
	Replay bool
}

// maxAPIBody bounds the upstream answer read into an APIResponse.
const maxAPIBody = 16 << 20

// CallAPI is one fenced call METHOD /v1/apis/{api}/{path...}. Upstream answers
// of any status are returned as an APIResponse with a nil error; only the
// gateway's own problems are errors.
func (c *Client) CallAPI(ctx context.Context, api, method, path string, f Fence, body []byte, contentType string) (*APIResponse, error) {
	if err := CheckFencedMethod(method); err != nil {
		return nil, err
	}
	var h http.Header
	if contentType != "" {
		h = http.Header{"Content-Type": {contentType}}
	}
	return c.callAPI(ctx, api, method, path, f, h, body)
}

// CheckFencedMethod refuses (INVALID_REQUEST), before anything is sent, a
// method a fenced API call cannot have: fenced calls are POST, PUT, PATCH or
// DELETE, spelled in upper case as the gateway routes them; a GET goes to
// the API's read routes, unfenced. CallAPI refuses with it, and Transport
// fences exactly the methods it lets through.
func CheckFencedMethod(method string) error {
	if domain.IsFencedAPIMethod(method) {
		return nil
	}
	return domain.Errorf(domain.CodeInvalidRequest, "fenced API calls are POST, PUT, PATCH or DELETE, not %q", method)
}

// callAPI is CallAPI with the caller's own headers (an SDK's) besides the
// fence headers, which win.
func (c *Client) callAPI(ctx context.Context, api, method, path string, f Fence, header http.Header, body []byte) (*APIResponse, error) {
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	for k, v := range f.header() {
		h[k] = v
	}
	op := "call " + api
	resp, err := c.send(ctx, request{op: op, method: method, path: apiPath(api, path), header: h, body: bytes.NewReader(body)})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody))
	if fe := gatewayProblem(resp.Header.Get("Content-Type"), b); fe != nil {
		return nil, fe
	}
	rid := resp.Header.Get("Fence-Receipt")
	if rerr != nil || rid == "" {
		// Not an answer the gateway vouches for: the effect may or may not exist.
		return nil, &UncertainError{Op: op, Err: fmt.Errorf("HTTP %d without Fence-Receipt (read error: %v)", resp.StatusCode, rerr)}
	}
	return &APIResponse{Status: resp.StatusCode, Header: resp.Header, Body: b, Receipt: rid,
		Replay: resp.Header.Get("Fence-Replay") == "true"}, nil
}

func apiPath(api, path string) string {
	for len(path) > 0 && path[0] == '/' {
		path = path[1:]
	}
	return "/v1/apis/" + escapePath(api) + "/" + escapePath(path)
}

// responseOf rebuilds an APIResponse from a receipt's stored upstream answer.
func responseOf(r domain.Receipt) *APIResponse {
	out := &APIResponse{Receipt: r.ID, Replay: true, Header: http.Header{}}
	if r.Response != nil {
		out.Status, out.Body = r.Response.Status, r.Response.Body
		for k, v := range r.Response.Header {
			out.Header.Set(k, v)
		}
	}
	return out
}
