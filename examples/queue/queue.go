// Package queue is a worked example of delegation over a real broker (NATS
// JetStream): a coordinator leases a batch, writes the batch's manifest as
// segment 1 (which raises the resource's fence), mints one delegation of its
// lease for the consumer identity covering the parts' segments, and
// publishes one task per part, each carrying the grant, the delegation and
// its segment. Consumers write each task through the gateway authenticated
// as themselves (client.DelegatedWriter). When the coordinator pauses past
// its TTL and a new one takes over, the old coordinator's late tasks are
// refused — LEASE_NOT_HELD by the delegate's writer once the registry
// states the old lease expired, or STALE_OWNER by the gateway, even with
// segment numbers never used — while the new coordinator's land. README.md walks through it;
// e2e/queue_test.go runs it against the gateway binary and JetStream.
package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
	"github.com/nats-io/nats.go/jetstream"
)

// Task is one message on the queue: write Body to Key in Store as Segment,
// under Grant, as the delegate Delegation names.
type Task struct {
	Grant      string `json:"grant"`
	Delegation string `json:"delegation"`
	Segment    uint64 `json:"segment"`
	Store      string `json:"store"`
	Key        string `json:"key"`
	Body       []byte `json:"body"`
}

// Coordinator fans a leased batch out over a JetStream subject.
type Coordinator struct {
	Lease    *client.Lease
	JS       jetstream.JetStream
	Subject  string
	Store    string // the object store, e.g. "local"
	Consumer string // the delegate: the consumers' workload identity
}

// Run writes the manifest to prefix+"/manifest" as the lease's next segment,
// delegates the next len(parts) segments to the consumer and publishes one
// task per part (prefix+"/part-N"). Give it the lease's Context: once the
// lease stops allowing effects (a pause past the TTL), it stops before the
// next step. It returns the delegation minted.
func (c *Coordinator) Run(ctx context.Context, prefix string, parts [][]byte) (client.Delegation, error) {
	manifest := fmt.Appendf(nil, "%d parts", len(parts))
	r, err := c.Lease.Objects(c.Store).Put(ctx, prefix+"/manifest", bytes.NewReader(manifest), "text/plain")
	if err != nil {
		return client.Delegation{}, fmt.Errorf("manifest: %w", err)
	}
	first := r.Segment + 1
	d, err := c.Lease.Delegate(ctx, client.DelegateParams{Delegate: c.Consumer, SegmentFrom: first, SegmentTo: first + uint64(len(parts)) - 1})
	if err != nil {
		return d, fmt.Errorf("delegate: %w", err)
	}
	for i, body := range parts {
		if err := context.Cause(ctx); err != nil {
			return d, err // the lease was lost: publish nothing more
		}
		seg := first + uint64(i)
		t := Task{Grant: c.Lease.Grant(), Delegation: d.Delegation, Segment: seg, Store: c.Store,
			Key: fmt.Sprintf("%s/part-%d", prefix, seg), Body: body}
		b, _ := json.Marshal(t)
		if _, err := c.JS.Publish(ctx, c.Subject, b); err != nil {
			return d, fmt.Errorf("publish segment %d: %w", seg, err)
		}
	}
	return d, nil
}

// Consumer writes tasks through the gateway as the delegate, keeping one
// DelegatedWriter per delegation it meets.
type Consumer struct {
	Client *client.Client
	// Options are given to every writer (client.WithoutStatusProofs for a
	// gateway in query mode).
	Options []client.DelegatedOption
	// Retry is the redelivery delay of a task that may succeed later
	// (default 1 s).
	Retry time.Duration

	mu      sync.Mutex
	writers map[string]*client.DelegatedWriter
}

// Result is what became of one task.
type Result struct {
	Task    Task
	Receipt fencegate.Receipt
	Err     error
	// Verdict is what was done with the message: "ack" (landed), "term"
	// (refused for good: never redelivered) or "nak" (redelivered later).
	Verdict string
}

// Handle writes msg's task and settles the message: Ack once it landed,
// Term when refused for good (STALE_OWNER, LEASE_NOT_HELD, a revoked or
// foreign delegation, a quarantined payload...), NakWithDelay when it may land
// later (SEGMENT_OUT_OF_ORDER: an earlier segment is still on its way;
// MUTATION_UNKNOWN or an uncertain answer: the same segment is sent again
// and the gateway answers the original receipt).
func (c *Consumer) Handle(ctx context.Context, msg jetstream.Msg) Result {
	var t Task
	if err := json.Unmarshal(msg.Data(), &t); err != nil {
		_ = msg.Term()
		return Result{Err: err, Verdict: "term"}
	}
	res := Result{Task: t}
	w, err := c.writer(t)
	if err == nil {
		res.Receipt, err = w.Put(ctx, t.Store, t.Key, t.Segment, bytes.NewReader(t.Body), "application/octet-stream")
	}
	res.Err = err
	switch code := fencegate.ErrorCode(err); {
	case err == nil:
		res.Verdict = "ack"
		_ = msg.Ack()
	case client.IsUncertain(err), code == fencegate.CodeSegmentOutOfOrder, code == fencegate.CodeMutationUnknown,
		code == fencegate.CodeResourceBusy, code == fencegate.CodeBackendUnavailable, code == fencegate.CodeInternal:
		res.Verdict = "nak"
		_ = msg.NakWithDelay(c.retry())
	default:
		res.Verdict = "term"
		_ = msg.Term()
	}
	return res
}

// Process fetches up to n tasks from cons (waiting at most wait) and
// handles each, in order.
func (c *Consumer) Process(ctx context.Context, cons jetstream.Consumer, n int, wait time.Duration) ([]Result, error) {
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(wait))
	if err != nil {
		return nil, err
	}
	var out []Result
	for msg := range batch.Messages() {
		out = append(out, c.Handle(ctx, msg))
	}
	return out, batch.Error()
}

func (c *Consumer) writer(t Task) (*client.DelegatedWriter, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.writers[t.Delegation]; w != nil {
		return w, nil
	}
	w, err := c.Client.DelegatedWriter(t.Grant, t.Delegation, c.Options...)
	if err != nil {
		return nil, err
	}
	if c.writers == nil {
		c.writers = map[string]*client.DelegatedWriter{}
	}
	c.writers[t.Delegation] = w
	return w, nil
}

func (c *Consumer) retry() time.Duration {
	if c.Retry > 0 {
		return c.Retry
	}
	return time.Second
}
