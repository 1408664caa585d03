package fencerules

import "github.com/fencegate/fencegate"

// The names lists are known by in their cursors: a cursor of one list (or
// one filter) is refused by another.
func ByOperationList(operationID string) string { return "receipts/operation/" + operationID }

// ByResourceList names the receipts of one resource.
func ByResourceList(resource string) string { return "receipts/resource/" + resource }

// ByStateList names the receipts in one state.
func ByStateList(state fencegate.ReceiptState) string { return "receipts/state/" + string(state) }

// QuarantineList names the quarantine of one resource, or of all ("").
func QuarantineList(resource string) string { return "quarantine/" + resource }

// Pager fills one page of a list that a store reads in list order, starting
// after the cursor's position. Every store uses it, so pages end at the same
// item everywhere: after Page.Size items, or early once they hold
// fencegate.MaxPageBytes (never before the first item).
type Pager struct {
	list  string
	max   int
	n     int
	bytes int
	last  fencegate.Position
	// Next is the cursor of the following page once Take refused an item.
	Next string
}

// NewPager checks page and decodes its cursor for list. after is the position
// to start after (ok false: from the start).
func NewPager(list string, page fencegate.Page) (pg *Pager, after fencegate.Position, ok bool, err error) {
	if err := page.Check(); err != nil {
		return nil, after, false, err
	}
	after, ok, err = fencegate.ParseCursor(list, page.Cursor)
	if err != nil {
		return nil, after, false, err
	}
	return &Pager{list: list, max: page.Size()}, after, ok, nil
}

// Fetch is how many items a store should read for the page: one more than it
// may hold, so that a full page knows whether another follows.
func (pg *Pager) Fetch() int { return pg.max + 1 }

// Take reports whether the item at pos of about size bytes joins the page.
// Once it answers false the page is complete and Next names the position after
// the last item taken: the store stops reading.
func (pg *Pager) Take(pos fencegate.Position, size int) bool {
	if pg.n == pg.max || (pg.n > 0 && pg.bytes+size > fencegate.MaxPageBytes) {
		pg.Next = pg.last.Cursor(pg.list)
		return false
	}
	pg.n++
	pg.bytes += size
	pg.last = pos
	return true
}
