package s3

import (
	"testing"
	"time"
)

// TestPresignExpiresEndsWithinASecondOfTheDeadline: X-Amz-Date (whole
// seconds) + X-Amz-Expires is after now and less than LandBySlack past the
// deadline; a deadline already passed is not signed at all.
func TestPresignExpiresEndsWithinASecondOfTheDeadline(t *testing.T) {
	base := time.Date(2031, 1, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ now, until time.Duration }{
		{0, time.Second}, {10 * time.Millisecond, 500 * time.Millisecond}, {990 * time.Millisecond, 1010 * time.Millisecond},
		{400 * time.Millisecond, 3400 * time.Millisecond}, {0, 30 * 24 * time.Hour},
	} {
		now, until := base.Add(tc.now), base.Add(tc.until)
		secs, ok := presignExpires(now, until)
		end := now.Truncate(time.Second).Add(time.Duration(secs) * time.Second)
		if !ok || !end.After(now) || !end.Before(until.Add(time.Second)) && secs != maxPresignExpires {
			t.Errorf("now +%v, until +%v: X-Amz-Expires %d (ok %v) ends at +%v", tc.now, tc.until, secs, ok, end.Sub(base))
		}
	}
	for _, d := range []time.Duration{0, -time.Millisecond, -time.Hour} {
		if secs, ok := presignExpires(base, base.Add(d)); ok {
			t.Errorf("deadline %v from now: signed for %d s, want not sent", d, secs)
		}
	}
}
