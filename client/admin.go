package client

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/fencegate/fencegate/domain"
)

// The admin calls need an admin credential (the Client's token must be one);
// they answer the gateway's JSON as is.

// RevokeEpoch revokes issuer epoch n: POST /v1/admin/epochs/{n}/revoke.
func (c *Client) RevokeEpoch(ctx context.Context, n uint64) (json.RawMessage, error) {
	return c.admin(ctx, "revoke epoch", "POST", "/v1/admin/epochs/"+strconv.FormatUint(n, 10)+"/revoke", nil)
}

// RotateKey starts a signing-key rotation: POST /v1/admin/keys/rotate.
func (c *Client) RotateKey(ctx context.Context) (json.RawMessage, error) {
	return c.admin(ctx, "rotate key", "POST", "/v1/admin/keys/rotate", nil)
}

// SetFloor makes every later fence greater than floor: POST /v1/admin/floor.
func (c *Client) SetFloor(ctx context.Context, floor uint64) (json.RawMessage, error) {
	return c.admin(ctx, "set floor", "POST", "/v1/admin/floor", map[string]uint64{"floor": floor})
}

// SetMode sets the enforcement mode ("enforce" or "shadow") of resources
// matching pattern: PUT /v1/admin/modes.
func (c *Client) SetMode(ctx context.Context, pattern, mode string, breakGlass bool) (json.RawMessage, error) {
	return c.admin(ctx, "set mode", "PUT", "/v1/admin/modes", struct {
		Pattern    string `json:"pattern"`
		Mode       string `json:"mode"`
		BreakGlass bool   `json:"breakGlass"`
	}{pattern, mode, breakGlass})
}

// BumpPolicy raises the policy generation: POST /v1/admin/policy/bump.
func (c *Client) BumpPolicy(ctx context.Context) (json.RawMessage, error) {
	return c.admin(ctx, "bump policy", "POST", "/v1/admin/policy/bump", nil)
}

// ModePage is one page of GET /v1/admin/modes.
type ModePage struct {
	Modes []struct {
		Pattern string `json:"pattern"`
		Mode    string `json:"mode"`
	} `json:"modes"`
	Next string `json:"next,omitempty"`
}

// Modes reads one page of the enforcement modes in force, by pattern:
// GET /v1/admin/modes.
func (c *Client) Modes(ctx context.Context, page domain.Page) (ModePage, error) {
	var out ModePage
	err := c.do(ctx, request{op: "modes", method: "GET", path: "/v1/admin/modes", query: pageQuery(nil, page)}, &out)
	return out, err
}

func (c *Client) admin(ctx context.Context, op, method, path string, body any) (json.RawMessage, error) {
	var out json.RawMessage
	r := request{op: op, method: method, path: path}
	if body != nil {
		r.json = body
	}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Binding reads the resource an object key is bound to (the resource that
// first wrote it): GET /v1/admin/bindings/{store}/{key}.
func (c *Client) Binding(ctx context.Context, store, key string) (json.RawMessage, error) {
	return c.admin(ctx, "read binding", "GET", bindingPath(store, key), nil)
}

// ClearBinding clears an object key's binding once no live lease covers the
// key: DELETE /v1/admin/bindings/{store}/{key}.
func (c *Client) ClearBinding(ctx context.Context, store, key string) (json.RawMessage, error) {
	return c.admin(ctx, "clear binding", "DELETE", bindingPath(store, key), nil)
}

// bindingPath is the admin path of an object key's binding, escaped as an
// object's path is: a '?' or '#' in the key names that key, never a shorter
// one.
func bindingPath(store, key string) string {
	return "/v1/admin/bindings/" + escapePath(store) + "/" + escapePath(key)
}
