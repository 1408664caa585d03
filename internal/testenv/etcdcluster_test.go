package testenv

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestEtcdClusterKeepsCommittedWritesThroughALeaderKillAndMove: the private
// cluster elects a new leader when its leader is killed, keeps what was
// committed, takes the killed member back on its own data, and hands the
// leadership to the member MoveLeader names.
func TestEtcdClusterKeepsCommittedWritesThroughALeaderKillAndMove(t *testing.T) {
	c := OwnEtcdCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}
	lead, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(lead); err != nil {
		t.Fatal(err)
	}
	if c.Running(lead) {
		t.Fatal("killed member still reported running")
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("two of three members did not elect a leader: %v\n%s", err, c.Logs())
	}
	if next, err := c.Leader(ctx); err != nil || next == lead {
		t.Fatalf("leader after the kill: %d %v (killed %d)", next, err, lead)
	}
	if _, err := cli.Put(ctx, "k", "during"); err != nil {
		t.Fatalf("write with one member down: %v", err)
	}
	if err := c.Start(lead); err != nil {
		t.Fatal(err)
	}
	// The restarted member catches up; then it is made the leader.
	for {
		err := c.MoveLeader(ctx, lead)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("move leader to the restarted member: %v\n%s", err, c.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		now, err := c.Leader(ctx)
		if err == nil && now == lead {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("leader is %d (%v), want %d", now, err, lead)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got, err := cli.Get(ctx, "k")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "during" {
		t.Fatalf("read after the move: %v %v", got, err)
	}
}
