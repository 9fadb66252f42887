package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/reclaim-registry/reclaim/registry/accesscontrol"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/referrers"
)

// failingDriver fails every write to the referrers index.
type failingDriver struct{ storagedriver.StorageDriver }

var errInjected = errors.New("injected storage failure")

func (f failingDriver) PutContent(ctx context.Context, p string, b []byte) error {
	if layout.Classify(p).Kind == layout.PathReferrerLink {
		return errInjected
	}
	return f.StorageDriver.PutContent(ctx, p, b)
}

// If the index cannot be written, the push still succeeds (the manifest is
// stored) but without OCI-Subject, so the client uses the tag fallback.
func TestReferrersIndexWriteFails(t *testing.T) {
	orig := openDriver
	t.Cleanup(func() { openDriver = orig })
	openDriver = func(ctx context.Context, c *configuration.Configuration) (storagedriver.StorageDriver, error) {
		d, err := orig(ctx, c)
		return failingDriver{d}, err
	}
	r := startRegistry(t, nil)
	img := r.pushImage("a", "v1")
	sig, resp := r.attach("a", img, sigType, nil)
	if got := resp.Header.Get("OCI-Subject"); got != "" {
		t.Errorf("OCI-Subject = %q after a failed index write, want none", got)
	}
	if resp, _ := r.do(http.MethodGet, "/v2/a/manifests/"+sig.Digest.String(), http.Header{"Accept": {v1.MediaTypeImageManifest}}, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("manifest after failed index write: %d, want 200", resp.StatusCode)
	}
}

// Manifest bodies the handler copies must reach Distribution unchanged, also
// when they are too large to index (Distribution refuses those itself).
func TestReferrersPutPassThrough(t *testing.T) {
	r := startRegistry(t, nil)
	big := make([]byte, referrers.MaxManifestSize+10)
	for i := range big {
		big[i] = ' '
	}
	copy(big, `{"schemaVersion":2}`)
	resp, body := r.do(http.MethodPut, "/v2/a/manifests/big", http.Header{"Content-Type": {v1.MediaTypeImageManifest}}, big)
	if resp.StatusCode/100 != 4 || resp.Header.Get("OCI-Subject") != "" {
		t.Errorf("oversized manifest: %d %s", resp.StatusCode, body)
	}
	// A subject-carrying manifest whose Content-Type disagrees with nothing
	// but lacks mediaType in the body is indexed with the Content-Type.
	img := r.pushImage("a", "v1")
	cfg := r.pushBlob("a", []byte("{}"), v1.MediaTypeEmptyJSON)
	raw := fmt.Appendf(nil, `{"schemaVersion":2,"artifactType":%q,"config":{"mediaType":%q,"digest":%q,"size":2},"layers":[{"mediaType":%q,"digest":%q,"size":2}],"subject":{"mediaType":%q,"digest":%q,"size":%d}}`,
		sigType, v1.MediaTypeEmptyJSON, cfg.Digest, v1.MediaTypeEmptyJSON, cfg.Digest, img.MediaType, img.Digest, img.Size)
	resp, body = r.do(http.MethodPut, "/v2/a/manifests/"+digest.FromBytes(raw).String(), http.Header{"Content-Type": {v1.MediaTypeImageManifest}}, raw)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("OCI-Subject") != img.Digest.String() {
		t.Fatalf("manifest without mediaType: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	_, idx := r.referrers("a", img.Digest, "")
	if len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != v1.MediaTypeImageManifest || idx.Manifests[0].Size != int64(len(raw)) {
		t.Errorf("referrers: %+v", idx.Manifests)
	}
}

// raceHandler is the referrers handler in front of a fake Distribution that
// answers status for every request, over an in-memory index, and leaves
// the revision link of payload in repository "a" there (linked) or not, as
// a racing PUT or DELETE on another instance would have.
func raceHandler(t *testing.T, status int, payload []byte, linked bool) (http.Handler, *referrers.Index) {
	t.Helper()
	d := inmemory.New()
	dgst := digest.FromBytes(payload)
	if err := d.PutContent(t.Context(), layout.BlobDataPath(dgst), payload); err != nil {
		t.Fatal(err)
	}
	b := backendFromDriver(d)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		link := layout.RevisionLinkPath("a", dgst)
		var err error
		if linked {
			err = d.PutContent(r.Context(), link, []byte(dgst))
		} else if err = d.Delete(r.Context(), link); layout.IsNotFound(err) {
			err = nil
		}
		if err != nil {
			t.Error(err)
		}
		if status == http.StatusCreated {
			w.Header().Set("Docker-Content-Digest", dgst.String())
		}
		w.WriteHeader(status)
	})
	h := newReferrersHandler(&configuration.Configuration{}, b, &accesscontrol.Control{}, next)
	return h, referrers.New(d)
}

// The index follows the revision link when a PUT and a DELETE of the same
// referrer race: each side re-checks the link after its index update.
func TestReferrersPutDeleteRace(t *testing.T) {
	subject := digest.FromString("subject")
	payload := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":%q,"artifactType":"a/b","config":{"mediaType":%q,"digest":%q,"size":2},"layers":[],"subject":{"mediaType":%q,"digest":%q,"size":1}}`,
		v1.MediaTypeImageManifest, v1.MediaTypeEmptyJSON, digest.FromString("{}"), v1.MediaTypeImageManifest, subject)
	d := digest.FromBytes(payload)
	for _, c := range []struct {
		name   string
		method string
		status int  // Distribution's answer
		linked bool // the revision link after Distribution answered
		want   int  // index entries after
		// rebuilt: the entry left is the one built from the payload
		rebuilt bool
	}{
		{"PUT indexes after a racing DELETE unlinked", http.MethodPut, http.StatusCreated, false, 0, false},
		{"PUT indexes a linked manifest", http.MethodPut, http.StatusCreated, true, 1, false},
		{"DELETE unindexes after a racing PUT relinked", http.MethodDelete, http.StatusAccepted, true, 1, true},
		{"DELETE unindexes an unlinked manifest", http.MethodDelete, http.StatusAccepted, false, 0, false},
		{"refused DELETE keeps the entry", http.MethodDelete, http.StatusNotFound, false, 1, false},
		// A server error may come after the link changed (a store error
		// after the write, a client gone): the entry follows the link.
		{"PUT that failed after its link indexes", http.MethodPut, http.StatusInternalServerError, true, 1, false},
		{"PUT that failed before its link does not index", http.MethodPut, http.StatusInternalServerError, false, 0, false},
		{"DELETE that failed after unlinking unindexes", http.MethodDelete, http.StatusInternalServerError, false, 0, false},
		{"DELETE that failed before unlinking keeps the entry", http.MethodDelete, http.StatusInternalServerError, true, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, idx := raceHandler(t, c.status, payload, c.linked)
			var body io.Reader
			if c.method == http.MethodPut {
				body = bytes.NewReader(payload)
			} else if err := idx.Add(t.Context(), "a", subject, v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: d, Size: 1}); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(c.method, "/v2/a/manifests/"+d.String(), body))
			got, err := idx.List(t.Context(), "a", subject)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != c.want {
				t.Errorf("%d entries after %s, want %d: %+v", len(got), c.method, c.want, got)
			}
			if wantHeader := map[bool]string{true: subject.String()}[c.want == 1 && c.status == http.StatusCreated]; c.method == http.MethodPut && rec.Header().Get("OCI-Subject") != wantHeader {
				t.Errorf("OCI-Subject %q, want %q", rec.Header().Get("OCI-Subject"), wantHeader)
			}
			if c.rebuilt && len(got) == 1 && (got[0].ArtifactType != "a/b" || got[0].Size != int64(len(payload))) {
				t.Errorf("after DELETE raced by a PUT: %+v, want the entry back, rebuilt from the payload", got)
			}
		})
	}
}
