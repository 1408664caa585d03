package registry

import (
	"crypto/rand"
	"strconv"
	"strings"
)

// An incarnation marker carries its claim generation: "inc_g<N>_<random>".
// A claim's generation is one above those of the marker it replaces and of
// the marker the claiming registry issued under, so a registry that finds
// on its backend a marker of a lower generation than its own knows it for a
// backup from before an earlier claim, restored, not another registry's new
// claim: it claims the backend anew instead of joining the old marker (which
// would make the leases restored with it read HELD again). Markers written
// before generations are generation 0.

// newMarker is a fresh marker of generation gen.
func newMarker(gen uint64) string {
	return "inc_g" + strconv.FormatUint(gen, 10) + "_" + rand.Text()
}

// markerGen is the generation id carries (0 for one without).
func markerGen(id string) uint64 {
	rest, ok := strings.CutPrefix(id, "inc_g")
	if !ok {
		return 0
	}
	n, _, ok := strings.Cut(rest, "_")
	if !ok {
		return 0
	}
	g, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		return 0
	}
	return g
}

// olderMarker reports whether marker id is of an earlier generation than
// the marker this registry issues under (seen).
func olderMarker(id, seen string) bool {
	return markerGen(id) < markerGen(seen)
}
