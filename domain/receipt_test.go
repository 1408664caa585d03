package domain

import "testing"

// Rule: a kept request is refused (INVALID_REQUEST) unless every store can
// keep its text as sent: UTF-8 without NUL in its method, path, key and
// headers. PostgreSQL refuses NUL in text and jsonb, so a NUL passed here
// was kept by the embedded store and failed INTERNAL on Postgres.
func TestAKeptRequestIsTextEveryStoreKeeps(t *testing.T) {
	ok := EffectRequest{Method: "POST", Path: "/v1/payouts", Key: "k1", Header: map[string][]string{"Idempotency-Key": {"k1"}}, Body: []byte("a\x00b")}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a request with a NUL only in its body (kept as bytes): %v", err)
	}
	for name, bad := range map[string]EffectRequest{
		"NUL in the path":         {Method: "POST", Path: "/v1/pay\x00outs"},
		"NUL in the key":          {Method: "POST", Path: "/p", Key: "k\x00"},
		"NUL in a header value":   {Method: "POST", Path: "/p", Header: map[string][]string{"X-A": {"a\x00"}}},
		"NUL in a header name":    {Method: "POST", Path: "/p", Header: map[string][]string{"X-\x00": {"a"}}},
		"non-UTF-8 header value":  {Method: "POST", Path: "/p", Header: map[string][]string{"X-A": {"\xff"}}},
		"non-UTF-8 in the method": {Method: "PO\xffST", Path: "/p"},
	} {
		if err := bad.Validate(); ErrorCode(err) != CodeInvalidRequest {
			t.Errorf("%s: %v, want INVALID_REQUEST", name, err)
		}
	}
}
