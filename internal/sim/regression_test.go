package sim

import (
	"fmt"

	"github.com/fencegate/fencegate"
)

// heldByAnother is the lease the request's fence was admitted under, when
// that is another lease ("" otherwise): ground truth kept by onAdmitted.
func (w *world) heldByAnother(req fencegate.AdmitRequest) string {
	g := &req.Grant
	if l, ok := w.fenceOf[fmt.Sprint(g.Resource, "/", g.FenceToken)]; ok && l != g.Lease {
		return l
	}
	return ""
}

// checkRegressionAnswer checks the store's answer to an admission whose fence
// another lease already holds (a registry restored or failed over issued it
// again): DESIGN §6 makes it FENCE_REGRESSION (or STALE_OWNER once a higher
// fence is in), rejected and alarmed. Answered as a replay, QUARANTINED (a
// quarantine record blaming the other lease's segment), busy or out of order,
// the store judged it as the other lease's own write (an admission is the
// gate "regressed token"). Most such requests are the new lease's segment 1,
// which meets the old lease's live segment 1: a store that skips the lease
// check answers QUARANTINED there, and only this gate sees it.
func (w *world) checkRegressionAnswer(req fencegate.AdmitRequest, held string, adm fencegate.Admission, err error) {
	if held == "" {
		return
	}
	w.stats.inject("fence held by another lease presented")
	g := &req.Grant
	switch code := fencegate.ErrorCode(err); {
	case err == nil && !adm.Replay:
		return // admitted: "regressed token"
	case err == nil, code == fencegate.CodeQuarantined, code == fencegate.CodeResourceBusy, code == fencegate.CodeSegmentOutOfOrder:
		answer := "a replay"
		if err != nil {
			answer = string(code)
		}
		w.stats.gate("regression answered as the holder's write")
		w.fail("fence %d of %s, admitted under lease %s, presented under lease %s seg %d: answered %s, not FENCE_REGRESSION",
			g.FenceToken, g.Resource, held, g.Lease, req.Segment, answer)
	}
}
