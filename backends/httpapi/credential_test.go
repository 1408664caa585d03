package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// TestACredentialsFileIsReadAgainWhenItChanges: a token renewed in the
// credentials file (an expiring OAuth token, PayPal's) is sent from the next
// call on, without a restart; a file that goes missing keeps the last value.
func TestACredentialsFileIsReadAgainWhenItChanges(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = w.Write([]byte(`{"id":"po_1"}`))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "token")
	write := func(v string) {
		if err := os.WriteFile(file, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("A21AA-first")
	c := validConfig(srv.URL)
	c.Credentials = &Credentials{Prefix: "Bearer ", File: file}
	api, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	call := func(seg uint64) {
		r := fencegate.Receipt{ID: fmt.Sprint("r", seg), Resource: "payouts/acc_1", OperationRoot: "o", FenceToken: 1, Segment: seg,
			CreatedAt: time.Now(), Target: fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts"), Method: "POST", State: fencegate.ReceiptPending}
		cl := api.Call("POST", "/v1/accounts/acc_1/payouts", nil, strings.NewReader(payout), int64(len(payout)))
		if r.Request, err = cl.KeptRequest(r); err != nil {
			t.Fatal(err)
		}
		if o, err := cl.Apply(context.Background(), r, ""); err != nil || o.State != fencegate.ReceiptCommitted {
			t.Fatalf("call: %s %v", o.State, err)
		}
	}
	call(1)
	write("A21AA-renewed-token")
	call(2)
	write("A21AA-renewed-tokeN")       // the same length: its modification time tells
	later := time.Now().Add(time.Hour) // as a renewal an hour on would have it
	if err := os.Chtimes(file, later, later); err != nil {
		t.Fatal(err)
	}
	call(3)
	if err := os.WriteFile(file, nil, 0o600); err != nil { // caught mid-write
		t.Fatal(err)
	}
	call(4)
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	call(5)
	want := []string{"Bearer A21AA-first", "Bearer A21AA-renewed-token", "Bearer A21AA-renewed-tokeN", "Bearer A21AA-renewed-tokeN",
		"Bearer A21AA-renewed-tokeN"}
	if !slices.Equal(seen, want) {
		t.Fatalf("upstream saw %q, want %q", seen, want)
	}
}
