package registry_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest/s3test"
	"github.com/reclaim-registry/reclaim/trash"
)

// TestE2ETrashOnS3TwoInstances: on S3 (versitygw) with two instances on
// one bucket and one Redis, a collect on one instance is restored from the
// other, the image pulls byte for byte from both, and a purge from the
// other frees exactly the data the entries held (the bucket says).
func TestE2ETrashOnS3TwoInstances(t *testing.T) {
	addr := os.Getenv("RECLAIM_TEST_REDIS_ADDR")
	if os.Getenv("RECLAIM_TEST_VERSITYGW") == "" || addr == "" {
		t.Skip("needs RECLAIM_TEST_VERSITYGW and RECLAIM_TEST_REDIS_ADDR (two instances share one Redis)")
	}
	s3 := s3test.StartS3(t)
	var id [6]byte
	_, _ = rand.Read(id[:])
	root := "/trash-" + hex.EncodeToString(id[:])
	params := configuration.Parameters{}
	for k, v := range s3.Params(s3.Endpoint, root) {
		params[k] = v
	}
	onS3 := registrytest.WithConfig(func(c *configuration.Configuration) {
		c.Storage["s3aws"] = params
		delete(c.Storage, "filesystem")
	})
	opts := reclaimOptions(t, e2eWindow, addr) // one prefix for both
	opts["trash"] = map[string]any{"keep": "1h"}
	raw := s3.Driver(t, root)
	var gs [2]*gcRegistry
	for i := range gs {
		r := registrytest.Start(t, onS3, registrytest.WithStorageMiddleware("gchook", nil), registrytest.WithStorageMiddleware("reclaim", opts))
		gs[i] = &gcRegistry{Registry: r, raw: raw}
	}
	if err := linkdb.MarkLinkDBComplete(t.Context(), raw, time.Now()); err != nil {
		t.Fatal(err)
	}
	dropKeysAtEnd(t, gs[0], opts)
	a, b := gs[0], gs[1]

	repo := "team/s3"
	shared := layer(t)
	old := registrytest.Image(t, shared, layer(t))
	oldD := push(t, a, repo+":v1", old)
	push(t, a, repo+":v1", registrytest.Image(t, shared))
	a.settle(t)
	rep := a.collect(t, repo)
	if !contains(rep.ManifestsDeleted, oldD) || len(rep.BlobsInTrash) != 3 {
		t.Fatalf("collect on S3: manifests %v, in trash %v", rep.ManifestsDeleted, rep.BlobsInTrash)
	}
	if code := registrytest.ManifestStatus(t, b.Registry, repo+"@"+oldD.String()); code != http.StatusNotFound {
		t.Fatalf("pull from the other instance: %d, want 404", code)
	}
	res := b.restore(t, "run="+rep.RunID)
	if res.Left != 0 || res.Restored == 0 {
		t.Fatalf("restore from the other instance: %+v", res)
	}
	registrytest.AssertPullable(t, a.Registry, repo+"@"+oldD.String())
	registrytest.AssertPullable(t, b.Registry, repo+"@"+oldD.String())

	// collect again, purge from the other instance: exactly what the
	// trash held goes
	push(t, a, repo+":v2", registrytest.Image(t, layer(t))) // something new, so the repository stays
	a.settle(t)
	rep = a.collect(t, repo)
	if !contains(rep.ManifestsDeleted, oldD) {
		t.Fatalf("second collect: %+v", rep.ManifestsDeleted)
	}
	b.settle(t)
	code, body := b.post(t, "/gc/v1/trash/purge?older_than=0s")
	var pr trash.PurgeReport
	if code != http.StatusOK || json.Unmarshal(body, &pr) != nil {
		t.Fatalf("purge: %d %s", code, body)
	}
	if pr.BlobsFreed != 3 || pr.BytesFreed != rep.BytesInTrash {
		t.Fatalf("purge freed %d blobs, %d bytes; the trash held %d bytes: %s", pr.BlobsFreed, pr.BytesFreed, rep.BytesInTrash, body)
	}
	for _, d := range blobsOf(t, old) {
		_, err := raw.Stat(t.Context(), layout.BlobDataPath(d))
		if gone := layout.IsNotFound(err); gone == (d == hashDigest(digestOf(t, shared))) {
			t.Fatalf("after the purge, %s in the bucket: gone=%v (%v)", d, gone, err)
		}
	}
	registrytest.AssertPullable(t, b.Registry, repo+":v1")
}
