package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestOwnPostgresKeepsDataAcrossRestartAndKill: a private server comes up on
// its own port, refuses connections while stopped, and keeps committed rows
// across a clean restart and across a crash (Kill, then Start).
func TestOwnPostgresKeepsDataAcrossRestartAndKill(t *testing.T) {
	pg := OwnPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exec := func(sql string) error {
		c, err := pgx.Connect(ctx, pg.URL())
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, sql)
		return err
	}
	count := func() int {
		t.Helper()
		c, err := pgx.Connect(ctx, pg.URL())
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer c.Close(ctx)
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil {
			t.Fatalf("count: %v", err)
		}
		return n
	}
	if err := exec("CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	pg.Stop()
	if err := exec("SELECT 1"); err == nil {
		t.Fatal("a stopped server answered")
	}
	pg.Start()
	if err := exec("INSERT INTO kept VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	pg.Kill()
	if err := exec("SELECT 1"); err == nil {
		t.Fatal("a killed server answered")
	}
	pg.Start()
	pg.Restart()
	if n := count(); n != 2 {
		t.Fatalf("rows after restart and crash = %d, want 2", n)
	}
}
