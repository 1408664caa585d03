package domain

import (
	"testing"
	"time"
)

// TestCursorIsBoundToItsList: a cursor decodes to the position it was made
// from, for its own list only; altered or foreign cursors are INVALID_REQUEST.
func TestCursorIsBoundToItsList(t *testing.T) {
	pos := Position{Group: "local/inv/7", At: time.UnixMicro(1_700_000_000_123_456).UTC(), ID: "rcpt_x"}
	c := pos.Cursor("receipts/operation/op-1")
	got, ok, err := ParseCursor("receipts/operation/op-1", c)
	if err != nil || !ok || got != pos {
		t.Fatalf("ParseCursor = %+v %v %v, want %+v", got, ok, err, pos)
	}
	if _, ok, err := ParseCursor("any", ""); ok || err != nil {
		t.Fatalf(`ParseCursor("") = %v %v, want the start`, ok, err)
	}
	for name, cur := range map[string]string{
		"another list": pos.Cursor("receipts/operation/op-2"),
		"not base64":   "!!",
		"truncated":    c[:10],
		"no ID":        Position{At: pos.At}.Cursor("receipts/operation/op-1"),
	} {
		if _, _, err := ParseCursor("receipts/operation/op-1", cur); ErrorCode(err) != CodeInvalidRequest {
			t.Errorf("%s: %v, want INVALID_REQUEST", name, err)
		}
	}
}

// TestPageLimitHasADefaultAndAHardMaximum: 0 is the default; above the
// maximum or below 0 is refused.
func TestPageLimitHasADefaultAndAHardMaximum(t *testing.T) {
	if (Page{}).Size() != DefaultPageLimit || (Page{Limit: 5}).Size() != 5 || (Page{Limit: MaxPageLimit + 1}).Size() != MaxPageLimit {
		t.Fatal("Size does not apply the default and the maximum")
	}
	for _, l := range []int{-1, MaxPageLimit + 1} {
		if ErrorCode(Page{Limit: l}.Check()) != CodeInvalidRequest {
			t.Errorf("limit %d accepted", l)
		}
	}
	if err := (Page{Limit: MaxPageLimit}).Check(); err != nil {
		t.Errorf("limit %d refused: %v", MaxPageLimit, err)
	}
}
