package middleware

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// A manifest DELETE by digest whose untag of one of its tags fails (a
// storage error) answers 500, not Distribution's 202: the tag still names
// the deleted manifest, and a client told "accepted" would never learn it.
// A DELETE that went through still answers 202.
func TestManifestDeleteWithFailedUntagIsNotAccepted(t *testing.T) {
	b := storagetest.Backends(t)[0]
	a := newTestApp(t, appOptions{redisAddr: b.Addr, prefix: b.Prefix})
	img := a.pushRandom("r:v1", 1)
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	testHook.Set(t, func(_ context.Context, m, p string) error {
		if m == "Delete" && strings.HasSuffix(p, "/_manifests/tags/v1") {
			return errors.New("injected storage fault")
		}
		return nil
	})
	if resp := a.do(http.MethodDelete, "/v2/r/manifests/"+d.String()); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("DELETE with a failed untag: %d, want 500", resp.StatusCode)
	}
	testHook.Set(t, nil)
	img2 := a.pushRandom("r:v2", 1)
	d2, _ := img2.Digest()
	if resp := a.do(http.MethodDelete, "/v2/r/manifests/"+d2.String()); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE: %d, want 202", resp.StatusCode)
	}
	if resp := a.do(http.MethodGet, "/v2/r/manifests/v2"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("tag of a deleted manifest: %d, want 404", resp.StatusCode)
	}
}
