package gctest

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// Store writes Distribution's layout directly into D.
type Store struct {
	T testing.TB
	D storagedriver.StorageDriver
}

// Put writes b at p.
func (f *Store) Put(p string, b []byte) {
	f.T.Helper()
	if err := f.D.PutContent(context.Background(), p, b); err != nil {
		f.T.Fatal(err)
	}
}

// Blob stores content and returns its descriptor.
func (f *Store) Blob(content string) v1.Descriptor {
	d := digest.FromString(content)
	f.Put(layout.BlobDataPath(d), []byte(content))
	return v1.Descriptor{MediaType: v1.MediaTypeImageLayerGzip, Digest: d, Size: int64(len(content))}
}

// Layer stores a blob and links it into repo.
func (f *Store) Layer(repo, content string) v1.Descriptor {
	desc := f.Blob(content)
	f.Put(layout.LayerLinkDir(repo, desc.Digest)+"/link", []byte(desc.Digest))
	return desc
}

// RawManifest stores b as a manifest of repo.
func (f *Store) RawManifest(repo string, b []byte) digest.Digest {
	d := digest.FromBytes(b)
	f.Put(layout.BlobDataPath(d), b)
	f.Put(layout.RevisionDir(repo, d)+"/link", []byte(d))
	return d
}

// Image pushes config + layers as an OCI manifest; subject optional.
func (f *Store) Image(repo string, subject *v1.Descriptor, layers ...string) v1.Descriptor {
	cfg := f.Layer(repo, "config of "+strings.Join(layers, ","))
	cfg.MediaType = v1.MediaTypeImageConfig
	m := v1.Manifest{MediaType: v1.MediaTypeImageManifest, Config: cfg, Subject: subject}
	m.SchemaVersion = 2
	for _, l := range layers {
		m.Layers = append(m.Layers, f.Layer(repo, l))
	}
	b, _ := json.Marshal(m)
	d := f.RawManifest(repo, b)
	return v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: d, Size: int64(len(b))}
}

// Index pushes an OCI index of children.
func (f *Store) Index(repo string, children ...v1.Descriptor) v1.Descriptor {
	ix := v1.Index{MediaType: v1.MediaTypeImageIndex, Manifests: children}
	ix.SchemaVersion = 2
	b, _ := json.Marshal(ix)
	d := f.RawManifest(repo, b)
	return v1.Descriptor{MediaType: v1.MediaTypeImageIndex, Digest: d, Size: int64(len(b))}
}

// Tag points tag of repo at d.
func (f *Store) Tag(repo, tag string, d digest.Digest) {
	f.Put(layout.TagCurrentPath(repo, tag), []byte(d))
	f.Put(path.Dir(layout.TagIndexPath(repo, tag, d))+"/link", []byte(d))
}

// Untag removes tag of repo.
func (f *Store) Untag(repo, tag string) {
	if err := f.D.Delete(context.Background(), layout.TagsDir(repo)+"/"+tag); err != nil {
		f.T.Fatal(err)
	}
}

// Tree lists every file in storage with its content, to prove a dry run
// changed nothing.
func (f *Store) Tree() string {
	var lines []string
	err := f.D.Walk(context.Background(), "/", func(fi storagedriver.FileInfo) error {
		if !fi.IsDir() {
			b, err := f.D.GetContent(context.Background(), fi.Path())
			if err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("%s %x", fi.Path(), digest.FromBytes(b).Encoded()[:8]))
		}
		return nil
	})
	if err != nil && !layout.IsNotFound(err) {
		f.T.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// Exists reports whether p exists.
func (f *Store) Exists(p string) bool {
	_, err := f.D.Stat(context.Background(), p)
	if err != nil && !layout.IsNotFound(err) {
		f.T.Fatal(err)
	}
	return err == nil
}

// WriteReverseLinks writes a reverse link for every forward link in f's
// storage, as the middleware would have.
func (f *Store) WriteReverseLinks() {
	ctx := context.Background()
	links := linkdb.NewReverseLinks(f.D)
	err := f.D.Walk(ctx, layout.RepositoriesRoot, func(fi storagedriver.FileInfo) error {
		p := layout.Classify(fi.Path())
		switch p.Kind {
		case layout.PathLayerLink:
			return links.Put(ctx, p.Digest, reclaim.RepoLink{Repo: p.Repo, Kind: reclaim.LinkLayer})
		case layout.PathRevisionLink:
			return links.Put(ctx, p.Digest, reclaim.RepoLink{Repo: p.Repo, Kind: reclaim.LinkManifest})
		}
		return nil
	})
	if err != nil {
		f.T.Fatal(err)
	}
}

// ScanLinks is a link index computed from the forward links, the way the
// middleware keeps it: correct by construction, O(registry), test only.
type ScanLinks struct{ D storagedriver.StorageDriver }

func (s ScanLinks) List(ctx context.Context, blob digest.Digest) ([]reclaim.RepoLink, error) {
	var out []reclaim.RepoLink
	suffixL := "/_layers/" + blob.Algorithm().String() + "/" + blob.Encoded() + "/link"
	suffixM := "/_manifests/revisions/" + blob.Algorithm().String() + "/" + blob.Encoded() + "/link"
	err := s.D.Walk(ctx, layout.RepositoriesRoot, func(fi storagedriver.FileInfo) error {
		p := fi.Path()
		for suffix, k := range map[string]reclaim.LinkKind{suffixL: reclaim.LinkLayer, suffixM: reclaim.LinkManifest} {
			if strings.HasSuffix(p, suffix) {
				repo := strings.TrimSuffix(strings.TrimPrefix(p, layout.RepositoriesRoot+"/"), suffix)
				out = append(out, reclaim.RepoLink{Repo: repo, Kind: k})
			}
		}
		return nil
	})
	if layout.IsNotFound(err) {
		err = nil
	}
	return out, err
}

// ListFor is List: the scan has no cheaper walk.
func (s ScanLinks) ListFor(ctx context.Context, blob digest.Digest, _ string) ([]reclaim.RepoLink, error) {
	return s.List(ctx, blob)
}

// FailingDelete fails every delete of one path with ErrBoom.
type FailingDelete struct {
	storagedriver.StorageDriver
	Path string
}

func (f FailingDelete) Delete(ctx context.Context, p string) error {
	if p == f.Path {
		return ErrBoom
	}
	return f.StorageDriver.Delete(ctx, p)
}
