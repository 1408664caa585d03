package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// TestReceiptTableNamesTheDelegateOfADelegatedWrite: the last column,
// DELEGATE, names a delegated write's delegate and delegation and is "-" on
// the owner's own writes; a list of the owner's own writes has it too, so
// every page of a list has the same columns.
func TestReceiptTableNamesTheDelegateOfADelegatedWrite(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	own := fencegate.Receipt{ID: "R1", State: fencegate.ReceiptCommitted, FenceToken: 7, Segment: 1, Method: "PUT",
		Target: "objects/bucket/jobs/a", OperationID: "op-1", Owner: "coord", CreatedAt: at}
	delegated := own
	delegated.ID, delegated.Segment, delegated.Delegate, delegated.DelegationID = "R2", 2, "consumer", "dlg_1"
	table := func(list ...fencegate.Receipt) []string {
		var out bytes.Buffer
		receiptTable(&cmd{out: &out}, list, nil)
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	lines := table(own, delegated)
	if len(lines) != 3 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "DELEGATE") ||
		!strings.HasSuffix(strings.TrimSpace(lines[1]), " -") || !strings.HasSuffix(lines[2], "consumer (dlg_1)") {
		t.Fatalf("a list with a delegated write:\n%s", strings.Join(lines, "\n"))
	}
	if lines := table(own); len(lines) != 2 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "DELEGATE") || !strings.HasSuffix(lines[1], " -") {
		t.Fatalf("the owner's own writes:\n%s", strings.Join(lines, "\n"))
	}
}

// TestQuarantineTableNamesTheDelegateOfARefusedWrite: the last column,
// DELEGATE, names the delegate and delegation that sent a refused delegated
// write and is "-" on the owner's; a list of the owner's alone has it too,
// so every page of a list has the same columns.
func TestQuarantineTableNamesTheDelegateOfARefusedWrite(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	own := fencegate.Quarantine{ID: "q_1", Resource: "bucket/jobs", FenceToken: 7, Segment: 1, ReceiptID: "R1",
		PayloadDigest: "sha256:bb", PayloadSize: 7, Owner: "coord", At: at, LastAt: at, Attempts: 1}
	delegated := own
	delegated.ID, delegated.Delegate, delegated.DelegationID = "q_2", "consumer", "dlg_1"
	table := func(list ...fencegate.Quarantine) []string {
		var out bytes.Buffer
		quarantineTable(&cmd{out: &out}, list)
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	lines := table(own, delegated)
	if len(lines) != 3 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "DELEGATE") ||
		!strings.HasSuffix(strings.TrimSpace(lines[1]), " -") || !strings.HasSuffix(lines[2], "consumer (dlg_1)") {
		t.Fatalf("a list with a delegate's refused write:\n%s", strings.Join(lines, "\n"))
	}
	if lines := table(own); len(lines) != 2 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "DELEGATE") || !strings.HasSuffix(lines[1], " -") {
		t.Fatalf("the owner's refused writes:\n%s", strings.Join(lines, "\n"))
	}
}
