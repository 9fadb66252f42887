package linkdb

import "time"

// Hooks for the black-box tests in package linkdb_test.

// CheckpointPath is where a rebuild keeps its progress.
const CheckpointPath = checkpointPath

// At returns o with its clock replaced.
func (o RebuildOptions) At(now func() time.Time) RebuildOptions {
	o.now = now
	return o
}

// BeforeDelete returns o with a hook that runs between a stale entry's
// re-check and its removal.
func (o RebuildOptions) BeforeDelete(hook func()) RebuildOptions {
	o.beforeDel = hook
	return o
}
