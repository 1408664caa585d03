package client

import (
	"context"
	"net/url"

	"github.com/fencegate/fencegate"
)

// UnknownReceipt is an UNKNOWN receipt with whether it is past the deadline
// for automatic reconciliation (then it needs a person).
type UnknownReceipt struct {
	fencegate.Receipt
	Overdue bool `json:"overdue"`
}

// Receipts lists the receipts of an operation, oldest first (GET
// /v1/receipts?operationId=). A recovering worker asks this first.
func (c *Client) Receipts(ctx context.Context, operationID string) ([]fencegate.Receipt, error) {
	var out struct {
		Receipts []fencegate.Receipt `json:"receipts"`
	}
	err := c.do(ctx, request{op: "receipts", method: "GET", path: "/v1/receipts",
		query: url.Values{"operationId": {operationID}}}, &out)
	return out.Receipts, err
}

// Receipt reads one receipt by ID.
func (c *Client) Receipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	var out fencegate.Receipt
	err := c.do(ctx, request{op: "receipt", method: "GET", path: "/v1/receipts/" + url.PathEscape(id)}, &out)
	return out, err
}

// Resource reads a resource's fence state (highest fence, root, last segment).
func (c *Client) Resource(ctx context.Context, name string) (fencegate.ResourceState, error) {
	var out fencegate.ResourceState
	err := c.do(ctx, request{op: "resource", method: "GET", path: "/v1/resources/" + escapePath(name)}, &out)
	return out, err
}

// Unknown lists UNKNOWN receipts (effects whose outcome is not settled yet).
func (c *Client) Unknown(ctx context.Context) ([]UnknownReceipt, error) {
	var out struct {
		Receipts []UnknownReceipt `json:"receipts"`
	}
	err := c.do(ctx, request{op: "unknown", method: "GET", path: "/v1/unknown"}, &out)
	return out.Receipts, err
}

// Quarantine lists quarantine records of one resource, or of all ("").
func (c *Client) Quarantine(ctx context.Context, resource string) ([]fencegate.Quarantine, error) {
	var q url.Values
	if resource != "" {
		q = url.Values{"resource": {resource}}
	}
	var out struct {
		Quarantine []fencegate.Quarantine `json:"quarantine"`
	}
	err := c.do(ctx, request{op: "quarantine", method: "GET", path: "/v1/quarantine", query: q}, &out)
	return out.Quarantine, err
}
