package registry_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// Redis lost its records (here: a second registry on the same storage with
// a fresh Redis prefix, so its recording epoch starts now) while storage
// holds an untagged manifest older than the window. A real run is refused
// until Redis has recorded for a full window; a preview shows what the run
// will delete then, and until when it is blocked. An unknown repository is
// still a 404, before any precondition.
func TestE2EPreviewWhileRecordingTooShort(t *testing.T) {
	old := startGC(t)
	d := deletable(t, old, "prev/app")

	r := registrytest.Start(t, registrytest.WithRootDirectory(old.Root),
		registrytest.WithStorageMiddleware("reclaim", reclaimOptions(t, time.Hour, "")))
	g := &gcRegistry{Registry: r, raw: rawDriver(t, r)}
	start := time.Now()
	dry := assertBlocked(t, g, "prev/app", string(reclaim.AbortRedisRecordingTooShort))
	if len(dry.ManifestsDeleted) != 1 || dry.ManifestsDeleted[0] != d || len(dry.BlobsDeleted) == 0 {
		t.Fatalf("preview deletes %v (blobs %v), want the untagged %s and its blobs", dry.ManifestsDeleted, dry.BlobsDeleted, d)
	}
	b := dry.Blockers[0]
	if b.Until == nil || b.Until.Before(start.Add(59*time.Minute)) || b.Until.After(time.Now().Add(time.Hour)) {
		t.Fatalf("blocker %+v: until should be the epoch plus the 1h window", b)
	}

	// The plan endpoint stores the blocked preview as a plan; applying it
	// is refused as long as the blocker holds, and deletes nothing.
	code, body := g.post(t, "/gc/v1/repositories/prev/app/plan")
	var resp struct {
		Plan   collector.Plan   `json:"plan"`
		Report collector.Report `json:"report"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &resp) != nil {
		t.Fatalf("plan: %d %s", code, body)
	}
	if len(resp.Plan.Manifests) != 1 || !hasBlocker(&resp.Report, string(reclaim.AbortRedisRecordingTooShort), collector.BlocksRun) {
		t.Fatalf("plan: %s", body)
	}
	code, body = g.post(t, "/gc/v1/repositories/prev/app/plans/"+resp.Plan.ID+"/apply?dry_run=false")
	if c, reason := decodeErr(t, body); code != http.StatusServiceUnavailable || c != "GC_ABORTED" || reason != string(reclaim.AbortRedisRecordingTooShort) {
		t.Fatalf("apply: %d %s", code, body)
	}
	if !stored(t, g, "prev/app", d) {
		t.Fatal("a blocked apply deleted the manifest")
	}

	for _, route := range []string{"/collect?dry_run=true", "/collect?dry_run=false", "/plan"} {
		code, hdr, body := g.send(t, http.MethodPost, "/gc/v1/repositories/no/such/app"+route, "")
		if c, _ := decodeErr(t, body); code != http.StatusNotFound || c != "NAME_UNKNOWN" || hdr.Get("Retry-After") != "" {
			t.Errorf("%s: %d %s, want 404 NAME_UNKNOWN", route, code, body)
		}
	}
}

// Until the link database is known complete, a preview and a real run both
// list linkdb_incomplete as a blocker of blobs: links go, blobs stay.
func TestE2EPreviewListsLinkDBIncomplete(t *testing.T) {
	g := startGC(t)
	d := deletable(t, g, "inc/app")
	if err := g.raw.Delete(t.Context(), "/reclaim/linkdb-complete"); err != nil {
		t.Fatal(err)
	}
	rep := g.collect(t, "inc/app") // a dry run, then a real run that agrees
	if !hasBlocker(rep, string(reclaim.AbortLinkDBIncomplete), collector.BlocksBlobs) || len(rep.BlobsDeleted) != 0 {
		t.Fatalf("report: blockers %+v, blobs deleted %v", rep.Blockers, rep.BlobsDeleted)
	}
	if !containsDigest(rep.ManifestsDeleted, d) {
		t.Fatalf("manifests deleted %v, want %s", rep.ManifestsDeleted, d)
	}
	if _, err := g.raw.Stat(t.Context(), layout.BlobDataPath(digest.Digest(d))); err != nil {
		t.Fatalf("the manifest's blob: %v; kept until the link database is complete", err)
	}
}
