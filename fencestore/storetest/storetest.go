// Package storetest is the contract test suite of fencegate.FenceStore. Every
// store runs it from its own tests:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) fencegate.FenceStore { return openEmptyStore(t) })
//	}
//
// Each rule of the FenceStore doc comment is a named subtest, and so is each
// rule of a folded settle (AdmitRequest.Prior) for a store that implements
// fencegate.PriorSettling (skipped, saying so, for one that does not); open
// is also called for a twin store that those compare against. After every
// rejected call the suite reads back everything a client can see (resource
// state, live receipts, receipts by state and by operation, versions and, but
// for QUARANTINED, the quarantine list) and requires it unchanged.
package storetest

import (
	"testing"

	"github.com/fencegate/fencegate"
)

// Run runs the contract against stores made by open. open must return a new,
// empty store for each call; Run closes it when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) fencegate.FenceStore) {
	tests := []struct {
		name string
		fn   func(f *fx)
	}{
		{"UnknownNamesAreNotFound", unknownNamesAreNotFound},
		{"AdmitRecordsReceiptAndState", admitRecordsReceiptAndState},
		{"InvalidRequestIsRejected", invalidRequestIsRejected},
		{"LowerFenceIsRejectedWithoutStateChange", lowerFenceIsRejected},
		{"HigherFenceNeedsSegmentOne", higherFenceNeedsSegmentOne},
		{"EqualFenceNeedsNextSegment", equalFenceNeedsNextSegment},
		{"SkippedSegmentIsRejected", skippedSegmentIsRejected},
		{"ReplayReturnsOriginalReceipt", replayReturnsOriginalReceipt},
		{"DifferentPayloadIsQuarantinedWithoutStateChange", differentPayloadIsQuarantined},
		{"EqualFenceUnderOtherLeaseIsRegression", equalFenceUnderOtherLeaseIsRegression},
		{"LowerFenceIssuedLaterIsRegression", lowerFenceIssuedLaterIsRegression},
		{"PendingEffectMakesResourceBusy", pendingEffectMakesResourceBusy},
		{"UnknownKeepsResourceBusyUntilSettled", unknownKeepsResourceBusyUntilSettled},
		{"FailedSegmentCanBeRetried", failedSegmentCanBeRetried},
		{"CommittedVersionIsRecorded", committedVersionIsRecorded},
		{"VersionSwapIsCompareAndSet", versionSwapIsCompareAndSet},
		{"TargetIsFencedUnderOneResource", targetIsFencedUnderOneResource},
		{"QuarantineBindsNoTarget", quarantineBindsNoTarget},
		{"BindingCanBeInspectedAndClearedWhenIdle", bindingCanBeInspectedAndClearedWhenIdle},
		{"DeleteForgetsVersion", deleteForgetsVersion},
		{"ReceiptsByOperationAreOrdered", receiptsByOperationAreOrdered},
		{"ReceiptsByState", receiptsByState},
		{"ListsArePagedWithStableCursors", listsArePagedWithStableCursors},
		{"BadPagesAreRefusedWithoutStateChange", badPagesAreRefusedWithoutStateChange},
		{"LargeReceiptsEndAPageEarly", largeReceiptsEndAPageEarly},
		{"QuarantineKeepsOneRecordPerDistinctPayload", quarantineKeepsOneRecordPerDistinctPayload},
		{"QuarantinePayloadOverTheBoundKeepsDigestAndSize", quarantinePayloadOverTheBoundKeepsDigestAndSize},
		{"QuarantinePagesAreRefusedWithoutStateChange", quarantinePagesAreRefusedWithoutStateChange},
		{"SettleRejectsIllegalTransitions", settleRejectsIllegalTransitions},
		{"FinalStateNeverChanges", finalStateNeverChanges},
		{"UnknownKeepsRetryAt", unknownKeepsRetryAt},
		{"IfPendingSettlesOnlyAnUntouchedReceipt", ifPendingSettlesOnlyAnUntouchedReceipt},
		{"ReceiptKeepsItsLandBy", receiptKeepsItsLandBy},
		{"RequestIsKeptVerbatim", requestIsKeptVerbatim},
		{"OversizedRequestIsRejectedWithoutStateChange", oversizedRequestIsRejected},
		{"UnknownRecordsAnotherAttempt", unknownRecordsAnotherAttempt},
		{"EffectKeyIsKeptAndPartOfTheSegment", effectKeyIsKeptAndPartOfTheSegment},
		{"DelegatedReceiptNamesItsDelegate", delegatedReceiptNamesItsDelegate},
		{"DelegatedQuarantineRecordNamesItsDelegate", delegatedQuarantineRecordNamesItsDelegate},
		{"HighestFenceNeverDecreases", highestFenceNeverDecreases},
		{"FencesAboveInt64Survive", fencesAboveInt64Survive},
		{"HighestFenceIsTheTopAcceptedFence", highestFenceIsTheTopAcceptedFence},
		{"DuplicateReceiptIDIsRejected", duplicateReceiptIDIsRejected},
		{"ConcurrentAdmissionsOnOneResource", concurrentAdmissions},
		{"ConcurrentRefusalsAreIsolated", concurrentRefusalsAreIsolated},
		{"ConcurrentAdmissionsIsolateAFailingMember", concurrentAdmissionsIsolateAFailingMember},
		{"GroupCommitsCountAdmissionsAndSettles", groupCommitsCountAdmissionsAndSettles},
		{"CompactionKeepsWhatRulesAndReplaysNeed", compactionKeepsWhatRulesAndReplaysNeed},
		{"CompactionKeepsTheSegmentAGiveBackMakesLast", compactionKeepsTheSegmentAGiveBackMakesLast},
		{"QuarantineCompactionDeletesRecordsLastAttemptedBeforeTheAge", quarantineCompactionDeletesRecordsLastAttemptedBeforeTheAge},
		{"QuarantineCompactionFreesTheReceiptsItPinned", quarantineCompactionFreesTheReceiptsItPinned},
		{"CompactionDeletesTheOldestFirst", compactionDeletesTheOldestFirst},
		{"PriorIsAppliedBeforeTheSegment", priorIsAppliedBeforeTheSegment},
		{"PriorCommitsWhateverTheSegmentsVerdict", priorCommitsWhateverTheSegmentsVerdict},
		{"ReplayWithAPrior", replayWithAPrior},
		{"RefusedPriorChangesNothing", refusedPriorChangesNothing},
		{"PriorOfAnotherResourceOrTarget", priorOfAnotherResourceOrTarget},
		{"FailedOrNotAppliedPriorGivesTheSegmentBack", failedOrNotAppliedPriorGivesTheSegmentBack},
		{"PriorIsDecidedOnlyWithAVerdict", priorIsDecidedOnlyWithAVerdict},
		{"ConcurrentPriorsAreIsolated", concurrentPriorsAreIsolated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(newFixture(t, s, open))
		})
	}
}

var (
	committed  = fencegate.Outcome{State: fencegate.ReceiptCommitted}
	failed     = fencegate.Outcome{State: fencegate.ReceiptFailed, Error: "backend refused"}
	unknown    = fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: "timeout"}
	notApplied = fencegate.Outcome{State: fencegate.ReceiptNotApplied, Error: "reconciled: not applied"}
)
