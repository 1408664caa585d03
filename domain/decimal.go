package domain

import "strconv"

// ParseCanonicalUint reads s as a number a request carries (a segment, an
// epoch, a page limit, a fence): a canonical decimal in 0..2^64-1, ASCII
// digits only, without sign, space or leading zero ("0" itself is
// canonical). strconv alone reads "01" as 1, a number a proxy, a log or an
// audit may read otherwise; a request holding one is refused, not read.
func ParseCanonicalUint(s string) (uint64, bool) {
	n, err := strconv.ParseUint(s, 10, 64) // refuses "", a sign, spaces, "_", "0x"
	return n, err == nil && (s[0] != '0' || len(s) == 1)
}
