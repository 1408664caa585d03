//go:build unix && !linux

package local_test

import "errors"

// exchange reports that names cannot be swapped atomically here.
func exchange(a, b string) error { return errors.New("no RENAME_EXCHANGE") }
