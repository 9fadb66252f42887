//go:build reclaim_testhooks

package registry

import (
	"context"
	"os"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/storage/layout"
)

// This file is built only with the reclaim_testhooks tag: the registry
// binary the end-to-end tests start (registrytest.Binary builds it so; CI
// builds its test binary so), never a release build, which gets
// gchalt_off.go instead and reads no test variable.
//
// haltEnv is the hook of the end-to-end test of interrupted runs
// (test/e2e, TestKilledCollectIsInterrupted): set to a file path, every
// blob delete of the collector (collections and the reclaimer) halts after
// it was written ahead in the run record and before it reaches the storage:
// it writes the blob's path to that file and waits there (until its fence
// deadline, 5 leases), so the test can SIGKILL the process at a known point.
// Nothing else reads it; a registry started with it logs a warning, and its
// collector never deletes a blob.
const haltEnv = "RECLAIM_TEST_HALT_GC_DELETE"

// testDriver is the driver the collector deletes through: d with haltEnv's
// halt, when it is set.
func testDriver(d storagedriver.StorageDriver) storagedriver.StorageDriver {
	marker := os.Getenv(haltEnv)
	if marker == "" {
		return d
	}
	logrus.Warnf("reclaim: %s is set: collections halt at their first blob delete (a test hook)", haltEnv)
	return &halting{StorageDriver: d, marker: marker}
}

type halting struct {
	storagedriver.StorageDriver
	marker string
}

func (h *halting) Delete(ctx context.Context, path string) error {
	if !strings.HasPrefix(path, layout.BlobsRoot+"/") {
		return h.StorageDriver.Delete(ctx, path)
	}
	if err := os.WriteFile(h.marker, []byte(path), 0o600); err != nil {
		return err
	}
	<-ctx.Done()
	return context.Cause(ctx)
}
