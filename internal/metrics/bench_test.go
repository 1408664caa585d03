package metrics_test

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/metrics"
)

// BenchmarkWriteObservations is what one committed fenced PUT tells the
// metrics: its request, admission, effect, settle wait and receipt.
//
// go test -run X -bench WriteObservations -benchmem ./internal/metrics/
func BenchmarkWriteObservations(b *testing.B) {
	m := metrics.New()
	b.ReportAllocs()
	for range b.N {
		m.Admission("admitted", time.Millisecond)
		m.Effect("objects/local", fencegate.ReceiptCommitted, "", time.Millisecond)
		m.Settle(fencegate.ReceiptCommitted, time.Millisecond)
		m.Settled(fencegate.ReceiptCommitted)
		m.Request("/v1/objects/*", "PUT", 200, time.Millisecond)
	}
}
