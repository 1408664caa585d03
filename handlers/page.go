package handlers

import (
	"net/http"
	"strconv"

	"github.com/fencegate/fencegate"
)

// pageOf reads the paging parameters every list takes: limit (1 to
// fencegate.MaxPageLimit, fencegate.DefaultPageLimit when absent) and cursor
// (the next of the previous page). Anything else is INVALID_REQUEST.
func pageOf(r *http.Request) (fencegate.Page, error) {
	q := r.URL.Query()
	p := fencegate.Page{Cursor: q.Get("cursor")}
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > fencegate.MaxPageLimit || len(v) > 1 {
			return p, fencegate.Errorf(fencegate.CodeInvalidRequest, "limit must be one integer from 1 to %d", fencegate.MaxPageLimit)
		}
		p.Limit = n
	}
	return p, nil
}
