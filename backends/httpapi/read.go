package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/fencegate/fencegate"
)

// Read forwards a read on a declared GET route: path (a path Match accepted
// for GET) and rawQuery go to the base URL with the client's header
// sanitised as for writes and the upstream credential added; no idempotency
// key, no fence headers, no receipt. The answer is the upstream's, streamed:
// the caller closes its body. An upstream
// that cannot be reached, or does not answer within the API's timeout, is
// BACKEND_UNAVAILABLE (a read changes nothing, so it is never UNKNOWN).
func (a *API) Read(ctx context.Context, path, rawQuery string, header http.Header) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.endpoint(path, rawQuery), http.NoBody)
	if err != nil {
		cancel()
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "cannot build the upstream read")
	}
	req.Header = a.forwardHeader(header)
	resp, err := a.client.Do(req)
	if err != nil {
		cancel()
		return nil, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("api %q: read failed", a.cfg.Name))
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelBody ends the read's timeout context when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
