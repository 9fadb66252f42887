package collector

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
)

// goldenReport fills every field of a report the way a run does.
func goldenReport(status gcrun.Status) *Report {
	rep := newReport("r1", "team/app", false, time.Hour, gctest.T0)
	la := gctest.T0.Add(-2 * time.Hour)
	rep.add(gc.Decision{Kind: reclaim.KindManifest, Digest: digest.FromString("m"), Reason: reclaim.ReasonTagged, Size: 7, Detail: "tag v1"})
	rep.add(gc.Decision{Kind: reclaim.KindLayerLink, Digest: digest.FromString("l"), Reason: reclaim.ReasonUnreferenced, LastAccess: &la})
	rep.add(gc.Decision{Kind: reclaim.KindBlob, Digest: digest.FromString("l"), Reason: reclaim.ReasonUnreferenced, Size: 42})
	rep.add(gc.Decision{Kind: reclaim.KindBlob, Digest: digest.FromString("b"), Reason: reclaim.ReasonDeleteFailed, Detail: "boom"})
	rep.Changed = []gc.Decision{{Kind: reclaim.KindManifest, Digest: digest.FromString("m"), Reason: reclaim.ReasonTagged}}
	rep.PlanID, rep.Abort, rep.FinishedAt = "p1", "redis_evicts", gctest.T0.Add(time.Second)
	rep.Timings = Timings{SnapshotMS: 1, PlanMS: 2, SweepMS: 3, TotalMS: 6}
	until := gctest.T0.Add(time.Hour)
	rep.Blockers = append(rep.Blockers, Blocker{Reason: reclaim.AbortRedisRecordingTooShort, Blocks: BlocksRun, Detail: "recording since", Until: &until},
		Blocker{Reason: reclaim.AbortLinkDBIncomplete, Blocks: BlocksBlobs})
	rep.Status = status
	return rep
}

// reportGolden is the JSON of goldenReport, %s standing for the status.
const reportGolden = `{"run_id":"r1","repository":"team/app","dry_run":false,"plan_id":"p1","status":"%s","abort_reason":"redis_evicts","started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z","window_seconds":3600,"blockers":[{"reason":"redis_recording_too_short","blocks":"run","detail":"recording since","until":"2026-01-01T01:00:00Z"},{"reason":"linkdb_incomplete","blocks":"blobs"}],"manifests_deleted":[],"layers_unlinked":["sha256:acac86c0e609ca906f632b0e2dacccb2b77d22b0621f20ebece1a4835b93f6f0"],"blobs_deleted":["sha256:acac86c0e609ca906f632b0e2dacccb2b77d22b0621f20ebece1a4835b93f6f0"],"bytes_freed":42,"kept":[{"kind":"manifest","digest":"sha256:62c66a7a5dd70c3146618063c344e531e6d4b59e379808443ce962b3abd63c5a","reason":"tagged","size":7,"detail":"tag v1","message":"a tag points at this manifest"},{"kind":"blob","digest":"sha256:3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d","reason":"delete_failed","detail":"boom","message":"the delete failed; kept"}],"changed":[{"kind":"manifest","digest":"sha256:62c66a7a5dd70c3146618063c344e531e6d4b59e379808443ce962b3abd63c5a","reason":"tagged","message":"a tag points at this manifest"}],"errors":[{"kind":"blob","digest":"sha256:3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d","reason":"delete_failed","detail":"boom","message":"the delete failed; kept"}],"timings":{"snapshot_ms":1,"plan_ms":2,"sweep_ms":3,"total_ms":6}}`

// The report's JSON is an API: these bytes must not change.
func TestReportJSONIsStable(t *testing.T) {
	for _, status := range []gcrun.Status{gcrun.StatusRunning, gcrun.StatusDone, gcrun.StatusAborted, gcrun.StatusFailed} {
		b, err := json.Marshal(goldenReport(status))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(reportGolden, status); string(b) != want {
			t.Errorf("status %s:\n got %s\nwant %s", status, b, want)
		}
	}
}
