package memory_test

import (
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/memory"
	"github.com/fencegate/fencegate/fencestore/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) fencegate.FenceStore { return memory.New() })
}
