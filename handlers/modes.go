package handlers

import (
	"net/http"
	"slices"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// modesList names the enforcement-mode list in its cursors.
const modesList = "admin/modes"

// modePage is one page of GET /v1/admin/modes.
type modePage struct {
	Modes []gateway.ModeRule `json:"modes"`
	Next  string             `json:"next,omitempty"`
}

// listModes answers GET /v1/admin/modes: the enforcement modes in force, by
// pattern (byte order), paged like every list (limit, cursor, next). Patterns
// not listed are enforced.
func (s *Server) listModes(w http.ResponseWriter, r *http.Request) {
	page, err := pageOf(r)
	var (
		after fencegate.Position
		from  bool
	)
	if err == nil {
		after, from, err = fencegate.ParseCursor(modesList, page.Cursor)
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	var rules []gateway.ModeRule
	if m := s.Gateway.Modes(); m != nil {
		rules = m.Rules()
	}
	slices.SortFunc(rules, func(a, b gateway.ModeRule) int { return strings.Compare(a.Pattern, b.Pattern) })
	out := modePage{Modes: []gateway.ModeRule{}}
	for _, rule := range rules {
		if from && rule.Pattern <= after.ID {
			continue
		}
		if len(out.Modes) == page.Size() {
			out.Next = fencegate.Position{ID: out.Modes[len(out.Modes)-1].Pattern}.Cursor(modesList)
			break
		}
		out.Modes = append(out.Modes, rule)
	}
	writeJSON(w, http.StatusOK, out)
}
