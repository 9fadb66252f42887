package referrers

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

func referrerDesc(i int, artifactType string) v1.Descriptor {
	b := fmt.Appendf(nil, `{"n":%d}`, i)
	return v1.Descriptor{
		MediaType:    v1.MediaTypeImageManifest,
		Digest:       digest.FromBytes(b),
		Size:         int64(len(b)),
		ArtifactType: artifactType,
		Annotations:  map[string]string{"n": fmt.Sprint(i)},
	}
}

func TestReferrersAddListRemove(t *testing.T) {
	ctx := context.Background()
	d := inmemory.New()
	r := New(d)
	subject := digest.FromString("subject")
	other := digest.FromString("other subject")

	got, err := r.List(ctx, "a/b", subject)
	if err != nil || len(got) != 0 {
		t.Fatalf("List on empty store = %v, %v; want empty, nil", got, err)
	}

	a, b := referrerDesc(1, "application/vnd.example.sig"), referrerDesc(2, "application/spdx+json")
	a.URLs = []string{"https://example.com/must-not-be-stored"}
	for _, desc := range []v1.Descriptor{a, b} {
		if err := r.Add(ctx, "a/b", subject, desc); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Add(ctx, "a/b", other, a); err != nil {
		t.Fatal(err)
	}
	// The same subject in another repository is another index.
	if err := r.Add(ctx, "c", subject, b); err != nil {
		t.Fatal(err)
	}

	got, err = r.List(ctx, "a/b", subject)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("List = %d entries, want 2: %+v", len(got), got)
	}
	for _, g := range got {
		want := a
		if g.Digest == b.Digest {
			want = b
		}
		if g.MediaType != want.MediaType || g.Size != want.Size || g.ArtifactType != want.ArtifactType ||
			g.Annotations["n"] != want.Annotations["n"] || g.URLs != nil {
			t.Errorf("entry %s = %+v, want %+v without URLs", g.Digest, g, want)
		}
	}
	if got[0].Digest > got[1].Digest {
		t.Errorf("List not sorted by digest: %s, %s", got[0].Digest, got[1].Digest)
	}

	if err := r.Remove(ctx, "a/b", subject, a.Digest); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(ctx, "a/b", subject, a.Digest); err != nil {
		t.Fatalf("second Remove = %v, want nil (already gone)", err)
	}
	got, _ = r.List(ctx, "a/b", subject)
	if len(got) != 1 || got[0].Digest != b.Digest {
		t.Fatalf("after Remove: %+v, want only %s", got, b.Digest)
	}
	for _, c := range []struct {
		repo    string
		subject digest.Digest
	}{{"a/b", other}, {"c", subject}} {
		if got, _ := r.List(ctx, c.repo, c.subject); len(got) != 1 {
			t.Errorf("%s %s: %d entries, want 1 (untouched)", c.repo, c.subject, len(got))
		}
	}
}

func TestReferrersInvalidInput(t *testing.T) {
	ctx := context.Background()
	r := New(inmemory.New())
	good := referrerDesc(1, "x")
	subject := digest.FromString("s")
	cases := []struct {
		name string
		err  error
	}{
		{"list bad repo", func() error { _, err := r.List(ctx, "../../blobs", subject); return err }()},
		{"list upper-case repo", func() error { _, err := r.List(ctx, "A", subject); return err }()},
		{"list bad subject", func() error { _, err := r.List(ctx, "a", "sha256:zz"); return err }()},
		{"add bad referrer", r.Add(ctx, "a", subject, v1.Descriptor{MediaType: "m", Digest: "sha256:../x"})},
		{"add no media type", r.Add(ctx, "a", subject, v1.Descriptor{Digest: good.Digest, Size: 1})},
		{"add negative size", r.Add(ctx, "a", subject, v1.Descriptor{MediaType: "m", Digest: good.Digest, Size: -1})},
		{"remove bad subject", r.Remove(ctx, "a", "", good.Digest)},
		{"negative page", func() error { _, _, err := r.Page(ctx, "a", subject, PageOptions{Limit: -1}); return err }()},
	}
	for _, c := range cases {
		if !errors.Is(c.err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", c.name, c.err)
		}
	}
}

func TestReferrersCorruptEntry(t *testing.T) {
	ctx := context.Background()
	d := inmemory.New()
	r := New(d)
	subject := digest.FromString("s")
	desc := referrerDesc(1, "x")
	p, _ := referrerEntryPath("a", subject, desc.Digest)
	// The file Add writes is what the middleware and linkdb classify as one.
	if c := layout.Classify(p); c.Kind != layout.PathReferrerLink || c.Digest != subject || c.Referrer != desc.Digest || c.Repo != "a" {
		t.Fatalf("Classify(%s) = %+v, want a referrer link of %s -> %s", p, c, subject, desc.Digest)
	}
	// A descriptor for another digest is as wrong as garbage: both fail closed.
	for _, content := range []string{"{not json", `{"mediaType":"m","digest":"` + digest.FromString("else").String() + `","size":1}`} {
		if err := d.PutContent(ctx, p, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if _, err := r.List(ctx, "a", subject); !errors.Is(err, ErrCorruptReferrer) {
			t.Errorf("content %q: err = %v, want ErrCorruptReferrer", content, err)
		}
	}
	// A stray file that is not named like a digest is ignored.
	if err := d.Delete(ctx, path.Dir(p)); err != nil {
		t.Fatal(err)
	}
	dir, _ := referrerSubjectDir("a", subject)
	if err := d.PutContent(ctx, path.Join(dir, "sha256", "not-a-digest", "link"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got, err := r.List(ctx, "a", subject); err != nil || len(got) != 0 {
		t.Errorf("stray file: List = %v, %v; want empty, nil", got, err)
	}
}

func TestReferrersPage(t *testing.T) {
	ctx := context.Background()
	r := New(inmemory.New())
	subject := digest.FromString("s")
	const n = 25
	for i := range n {
		at := "even"
		if i%2 == 1 {
			at = "odd"
		}
		if err := r.Add(ctx, "a", subject, referrerDesc(i, at)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		filter string
		limit  int
		want   int
	}{{"", 10, n}, {"", n, n}, {"", 1, n}, {"even", 5, 13}, {"odd", 4, 12}, {"none", 3, 0}} {
		t.Run(fmt.Sprintf("%s/%d", c.filter, c.limit), func(t *testing.T) {
			seen := map[digest.Digest]bool{}
			var after digest.Digest
			for pages := 0; ; pages++ {
				if pages > n+1 {
					t.Fatal("pagination does not end")
				}
				page, more, err := r.Page(ctx, "a", subject, PageOptions{After: after, Limit: c.limit, ArtifactType: c.filter})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > c.limit {
					t.Fatalf("page of %d > limit %d", len(page), c.limit)
				}
				for _, d := range page {
					if d.Digest <= after || seen[d.Digest] {
						t.Fatalf("%s out of order or repeated after %s", d.Digest, after)
					}
					if c.filter != "" && d.ArtifactType != c.filter {
						t.Fatalf("filter %q returned %q", c.filter, d.ArtifactType)
					}
					seen[d.Digest] = true
					after = d.Digest
				}
				if !more {
					break
				}
			}
			if len(seen) != c.want {
				t.Errorf("saw %d referrers, want %d", len(seen), c.want)
			}
		})
	}
}

// countingDriver counts the storage calls a query makes.
type countingDriver struct {
	storagedriver.StorageDriver
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingDriver) count(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[op]++
}

func (c *countingDriver) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.calls
	c.calls = map[string]int{}
	return old
}

func (c *countingDriver) GetContent(ctx context.Context, p string) ([]byte, error) {
	c.count("GetContent")
	return c.StorageDriver.GetContent(ctx, p)
}

func (c *countingDriver) List(ctx context.Context, p string) ([]string, error) {
	c.count("List")
	return c.StorageDriver.List(ctx, p)
}

func (c *countingDriver) Stat(ctx context.Context, p string) (storagedriver.FileInfo, error) {
	c.count("Stat")
	return c.StorageDriver.Stat(ctx, p)
}

func (c *countingDriver) Walk(ctx context.Context, p string, f storagedriver.WalkFn, opts ...func(*storagedriver.WalkOptions)) error {
	c.count("Walk")
	return c.StorageDriver.Walk(ctx, p, f, opts...)
}

func (c *countingDriver) PutContent(ctx context.Context, p string, b []byte) error {
	c.count("PutContent")
	return c.StorageDriver.PutContent(ctx, p, b)
}

func (c *countingDriver) Delete(ctx context.Context, p string) error {
	c.count("Delete")
	return c.StorageDriver.Delete(ctx, p)
}

// TestReferrersQueryCost pins the storage cost of a referrers query: one List
// per algorithm level plus one GetContent per returned referrer, so a query
// is O(referrers of that subject), never O(repository).
func TestReferrersQueryCost(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{0, 1, 10, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			d := &countingDriver{StorageDriver: inmemory.New(), calls: map[string]int{}}
			r := New(d)
			subject := digest.FromString("s")
			// Noise that a query must not touch: another subject, with many
			// referrers, in the same repository.
			for i := range 50 {
				if err := r.Add(ctx, "a", digest.FromString("noise"), referrerDesc(-i-1, "x")); err != nil {
					t.Fatal(err)
				}
			}
			for i := range n {
				if err := r.Add(ctx, "a", subject, referrerDesc(i, "x")); err != nil {
					t.Fatal(err)
				}
			}
			writes := d.reset()
			if writes["PutContent"] != n+50 || len(writes) != 1 {
				t.Errorf("Add: %v, want exactly one PutContent per entry", writes)
			}

			got, err := r.List(ctx, "a", subject)
			if err != nil || len(got) != n {
				t.Fatalf("List = %d, %v; want %d", len(got), err, n)
			}
			calls := d.reset()
			wantList := 2
			if n == 0 {
				wantList = 1 // no subject directory: one failed List
			}
			if calls["List"] != wantList || calls["GetContent"] != n || len(calls) > 2 {
				t.Errorf("List of %d referrers: %v, want List=%d GetContent=%d", n, calls, wantList, n)
			}
			t.Logf("referrers=%d: storage calls %v", n, calls)

			if n > 100 {
				if _, _, err := r.Page(ctx, "a", subject, PageOptions{Limit: 100}); err != nil {
					t.Fatal(err)
				}
				calls := d.reset()
				if calls["GetContent"] != 100 {
					t.Errorf("page of 100 out of %d: %v, want GetContent=100", n, calls)
				}
				t.Logf("referrers=%d, first page of 100: storage calls %v", n, calls)
			}

			if n > 0 {
				if err := r.Remove(ctx, "a", subject, got[0].Digest); err != nil {
					t.Fatal(err)
				}
				if calls := d.reset(); calls["Delete"] != 1 || len(calls) != 1 {
					t.Errorf("Remove: %v, want one Delete", calls)
				}
			}
		})
	}
}

func TestReferrerOf(t *testing.T) {
	subject := digest.FromString("subject")
	subj := fmt.Sprintf(`"subject":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":7}`, subject)
	cfg := `"config":{"mediaType":"application/vnd.example.config","digest":"` + digest.FromString("c").String() + `","size":1}`
	for _, c := range []struct {
		name, payload, contentType string
		ok                         bool
		mediaType, artifactType    string
		err                        bool
	}{
		{"artifactType wins", `{"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"a/b",` + cfg + `,` + subj + `}`, "", true, v1.MediaTypeImageManifest, "a/b", false},
		{"config media type", `{"mediaType":"application/vnd.oci.image.manifest.v1+json",` + cfg + `,` + subj + `}`, "", true, v1.MediaTypeImageManifest, "application/vnd.example.config", false},
		{"index has no config", `{"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[],` + subj + `}`, "", true, v1.MediaTypeImageIndex, "", false},
		{"Content-Type when body has none", `{` + cfg + `,` + subj + `}`, v1.MediaTypeImageManifest, true, v1.MediaTypeImageManifest, "application/vnd.example.config", false},
		{"shape when nobody says", `{"manifests":[],` + subj + `}`, "", true, v1.MediaTypeImageIndex, "", false},
		{"no subject", `{"mediaType":"application/vnd.oci.image.manifest.v1+json",` + cfg + `}`, "", false, "", "", false},
		{"not JSON", `<html>`, "", false, "", "", true},
		{"bad subject digest", `{"mediaType":"m","subject":{"digest":"sha256:00"}}`, "", false, "", "", true},
		{"no media type at all", `{` + subj + `}`, "", false, "", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := digest.FromString(c.payload)
			s, desc, ok, err := Of([]byte(c.payload), d, c.contentType)
			if (err != nil) != c.err || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Fatalf("err = %v, want error %v wrapping ErrInvalid", err, c.err)
			}
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v", ok, c.ok)
			}
			if !ok {
				return
			}
			if s != subject || desc.Digest != d || desc.Size != int64(len(c.payload)) ||
				desc.MediaType != c.mediaType || desc.ArtifactType != c.artifactType {
				t.Errorf("Of = %s, %+v; want subject %s, mediaType %q, artifactType %q", s, desc, subject, c.mediaType, c.artifactType)
			}
		})
	}
}

// BenchmarkReferrersList times a full referrers query on the filesystem
// driver (real files, no cache) for subjects with 1, 10 and 1000 referrers.
func BenchmarkReferrersList(b *testing.B) {
	for _, n := range []int{1, 10, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ctx := context.Background()
			d := filesystem.New(filesystem.DriverParameters{RootDirectory: b.TempDir(), MaxThreads: 100})
			r := New(d)
			subject := digest.FromString("s")
			for i := range n {
				if err := r.Add(ctx, "a", subject, referrerDesc(i, "x")); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				got, err := r.List(ctx, "a", subject)
				if err != nil || len(got) != n {
					b.Fatalf("List = %d, %v", len(got), err)
				}
			}
		})
	}
}
