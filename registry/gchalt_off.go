//go:build !reclaim_testhooks

package registry

import storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"

// testDriver is the driver the collector deletes through: in a release
// build, the Env's as it is. A build with the reclaim_testhooks tag (the
// end-to-end tests' binary) can halt it instead (gchalt.go).
func testDriver(d storagedriver.StorageDriver) storagedriver.StorageDriver { return d }
