package gateway_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/fencestore/embedded"
)

// openEmbedded is an embedded fence store in t's temporary directory,
// closed when t ends.
func openEmbedded(t *testing.T) *embedded.Store {
	t.Helper()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// payoutsConfig is the payouts API the API tests call at base: POST
// /v1/accounts/{account}/payouts under resource payouts/{account}, keys
// kept 24 h, the send timeout (0: the default); edit, if given, changes it
// first. t fails if the result does not validate.
func payoutsConfig(t *testing.T, base string, timeout time.Duration, edit ...func(*httpapi.APIConfig)) httpapi.APIConfig {
	t.Helper()
	c := httpapi.APIConfig{Name: "payouts", BaseURL: base, Timeout: timeout,
		Contract: httpapi.Contract{Idempotency: &httpapi.Idempotency{KeyRetention: 24 * time.Hour}},
		Routes:   []httpapi.Route{{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"}}}
	for _, e := range edit {
		e(&c)
	}
	if err := (httpapi.Config{APIs: []httpapi.APIConfig{c}}).Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}
