package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/embedded"
)

// Raw reads of the fence stores for the deferred settle's crash tests: what
// is durable, read without a gateway (a gateway's reads would prove a
// PENDING receipt from its object and hide what the store holds).

// rawPostgres reads every row of the Postgres fence store at dsn, each
// column under its JSON name (receipt_id -> receiptId), both tables in one
// snapshot (a REPEATABLE READ transaction): a killed gateway's last
// pipeline, BEGIN ... COMMIT sent whole, may still commit on the server
// after the kill, and two reads on either side of it would pair a receipt
// from before it with a resource row from after.
func rawPostgres(t *testing.T, dsn string) rawState {
	t.Helper()
	ctx, cancel := rawCtx()
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("raw read of the fence store: %v", err)
	}
	defer c.Close(ctx)
	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatalf("raw read of the fence store: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows := func(table, key string) map[string]map[string]any {
		out := map[string]map[string]any{}
		rs, err := tx.Query(ctx, "SELECT row_to_json(r)::text FROM "+table+" r")
		if err != nil {
			t.Fatalf("raw read of %s: %v", table, err)
		}
		defer rs.Close()
		for rs.Next() {
			var s string
			if err := rs.Scan(&s); err != nil {
				t.Fatal(err)
			}
			var cols map[string]any
			if err := json.Unmarshal([]byte(s), &cols); err != nil {
				t.Fatal(err)
			}
			row := map[string]any{}
			for k, v := range cols {
				row[camel(k)] = v
			}
			out[row[key].(string)] = row
		}
		if err := rs.Err(); err != nil {
			t.Fatalf("raw read of %s: %v", table, err)
		}
		return out
	}
	return rawState{receipts: rows("fence_receipts", "receiptId"), resources: rows("fence_resources", "resource")}
}

// camel turns a column name into its JSON name (settled_at -> settledAt).
func camel(s string) string {
	parts := strings.Split(s, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// rawEmbedded opens the embedded fence store of a stopped `gateway dev`
// (dataDir/fencestore.db) and reads the given resources and all their
// receipts.
func rawEmbedded(t *testing.T, dataDir string, resources []string) rawState {
	t.Helper()
	s, err := embedded.Open(filepath.Join(dataDir, "fencestore.db"))
	if err != nil {
		t.Fatalf("raw read of the fence store (is the gateway still running?): %v", err)
	}
	defer s.Close()
	ctx, cancel := rawCtx()
	defer cancel()
	st := rawState{receipts: map[string]map[string]any{}, resources: map[string]map[string]any{}}
	for _, res := range resources {
		rs, err := s.Resource(ctx, res)
		if fencegate.ErrorCode(err) == fencegate.CodeNotFound {
			continue
		} else if err != nil {
			t.Fatalf("raw read of %s: %v", res, err)
		}
		st.resources[res] = columns(t, rs)
		for page := (fencegate.Page{Limit: fencegate.MaxPageLimit}); ; {
			p, err := s.ReceiptsByResource(ctx, res, page)
			if err != nil {
				t.Fatalf("raw read of %s's receipts: %v", res, err)
			}
			for _, r := range p.Receipts {
				st.receipts[r.ID] = columns(t, r)
			}
			if p.Next == "" {
				break
			}
			page.Cursor = p.Next
		}
	}
	return st
}

// columns is v's JSON encoding as a map.
func columns(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// resourcesOf names the writers' resources.
func resourcesOf(ws []*deferWriter) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.res
	}
	return out
}
