package client

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/fencegate/fencegate/domain"
)

// UnknownReceipt is an UNKNOWN receipt with whether it is past the deadline
// for automatic reconciliation (then it needs a person).
type UnknownReceipt struct {
	domain.Receipt
	Overdue bool `json:"overdue"`
}

// UnknownPage is one page of GET /v1/unknown; Next is "" on the last.
type UnknownPage struct {
	Receipts []UnknownReceipt `json:"receipts"`
	Next     string           `json:"next,omitempty"`
}

// ReceiptQuery selects a list of receipts: by operation ID, else by resource.
type ReceiptQuery struct {
	OperationID string
	Resource    string
}

// maxPages bounds how many pages the All helpers follow (a gateway that kept
// answering a next page would otherwise never end).
const maxPages = 100_000

// pageQuery adds page's limit and cursor to q.
func pageQuery(q url.Values, page domain.Page) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if page.Limit > 0 {
		q.Set("limit", strconv.Itoa(page.Limit))
	}
	if page.Cursor != "" {
		q.Set("cursor", page.Cursor)
	}
	return q
}

// ReceiptPage reads one page of receipts, oldest first (GET /v1/receipts with
// operationId or resource, limit and cursor).
func (c *Client) ReceiptPage(ctx context.Context, sel ReceiptQuery, page domain.Page) (domain.ReceiptPage, error) {
	q := url.Values{}
	if sel.OperationID != "" {
		q.Set("operationId", sel.OperationID)
	} else {
		q.Set("resource", sel.Resource)
	}
	var out domain.ReceiptPage
	err := c.do(ctx, request{op: "receipts", method: "GET", path: "/v1/receipts", query: pageQuery(q, page)}, &out)
	return out, err
}

// Receipts lists every receipt of an operation, oldest first, following the
// pages. A recovering worker asks this first.
func (c *Client) Receipts(ctx context.Context, operationID string) ([]domain.Receipt, error) {
	return allPages(func(page domain.Page) ([]domain.Receipt, string, error) {
		p, err := c.ReceiptPage(ctx, ReceiptQuery{OperationID: operationID}, page)
		return p.Receipts, p.Next, err
	}, fmt.Sprintf("receipts of %q", operationID))
}

// allPages follows the pages one read returns, from the first (at the
// largest page size) until a page has no next cursor, collecting the items.
// On an error it returns what it had collected so far; after maxPages pages
// it gives up with INTERNAL ("what: more than maxPages pages").
func allPages[T any](read func(domain.Page) ([]T, string, error), what string) ([]T, error) {
	var all []T
	page := domain.Page{Limit: domain.MaxPageLimit}
	for range maxPages {
		items, next, err := read(page)
		if err != nil {
			return all, err
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		page.Cursor = next
	}
	return all, domain.Errorf(domain.CodeInternal, "%s: more than %d pages", what, maxPages)
}

// Receipt reads one receipt by ID.
func (c *Client) Receipt(ctx context.Context, id string) (domain.Receipt, error) {
	var out domain.Receipt
	err := c.do(ctx, request{op: "receipt", method: "GET", path: "/v1/receipts/" + url.PathEscape(id)}, &out)
	return out, err
}

// Resource reads a resource's fence state (highest fence, root, last segment).
func (c *Client) Resource(ctx context.Context, name string) (domain.ResourceState, error) {
	var out domain.ResourceState
	err := c.do(ctx, request{op: "resource", method: "GET", path: "/v1/resources/" + escapePath(name)}, &out)
	return out, err
}

// UnknownPage reads one page of UNKNOWN receipts (effects whose outcome is not
// settled yet), oldest first.
func (c *Client) UnknownPage(ctx context.Context, page domain.Page) (UnknownPage, error) {
	var out UnknownPage
	err := c.do(ctx, request{op: "unknown", method: "GET", path: "/v1/unknown", query: pageQuery(nil, page)}, &out)
	return out, err
}

// Unknown lists every UNKNOWN receipt, following the pages.
func (c *Client) Unknown(ctx context.Context) ([]UnknownReceipt, error) {
	return allPages(func(page domain.Page) ([]UnknownReceipt, string, error) {
		p, err := c.UnknownPage(ctx, page)
		return p.Receipts, p.Next, err
	}, "unknown receipts")
}

// QuarantinePage reads one page of quarantine records of one resource, or of
// all (""), without their payloads.
func (c *Client) QuarantinePage(ctx context.Context, resource string, page domain.Page) (domain.QuarantinePage, error) {
	q := url.Values{}
	if resource != "" {
		q.Set("resource", resource)
	}
	var out domain.QuarantinePage
	err := c.do(ctx, request{op: "quarantine", method: "GET", path: "/v1/quarantine", query: pageQuery(q, page)}, &out)
	return out, err
}

// QuarantineView is a quarantine record (with the refused payload when kept)
// beside the receipt accepted for its segment and, where the gateway has it,
// the accepted payload (AcceptedPayloadNote says why not otherwise).
type QuarantineView struct {
	Quarantine          domain.Quarantine `json:"quarantine"`
	Accepted            domain.Receipt    `json:"accepted"`
	AcceptedPayload     []byte            `json:"acceptedPayload,omitempty"`
	AcceptedPayloadKept bool              `json:"acceptedPayloadKept"`
	AcceptedPayloadNote string            `json:"acceptedPayloadNote,omitempty"`
}

// QuarantineRecord reads one quarantine record beside the accepted one
// (GET /v1/quarantine/{id}).
func (c *Client) QuarantineRecord(ctx context.Context, id string) (QuarantineView, error) {
	var out QuarantineView
	err := c.do(ctx, request{op: "quarantine", method: "GET", path: "/v1/quarantine/" + url.PathEscape(id)}, &out)
	return out, err
}
