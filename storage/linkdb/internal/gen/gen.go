// Package gen writes synthetic registries straight into a storage driver,
// in Distribution's layout, for linkdb's tests and measurements: far faster
// than pushing through the HTTP API, and shaped like a real registry (shared
// base layers, manifests whose JSON lists their layers, some referrers).
package gen

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/referrers"
)

// Spec is the shape of a generated registry. Each repository gets Images
// manifests of LayersPerImage layers each; the first SharedLayers layers of
// every image come from a pool shared by all repositories (base images).
// Every ReferrerEvery-th manifest (0: none) gets an artifact referring to it.
type Spec struct {
	Repos          int
	Images         int
	LayersPerImage int
	SharedLayers   int
	ReferrerEvery  int
	// Reverse also writes the reverse links, as a registry that always ran
	// the middleware would have; without it the registry is "upstream".
	Reverse bool
	Workers int
	// Seed makes different registries out of the same Spec.
	Seed string
}

// Stats is what Generate wrote.
type Stats struct {
	Blobs, LayerLinks, RevisionLinks, ReverseLinks, Referrers int64
}

// Links is the number of forward links.
func (s Stats) Links() int64 { return s.LayerLinks + s.RevisionLinks }

// RepoName is the name of generated repository i; every fourth is nested.
func RepoName(i int) string {
	if i%4 == 3 {
		return fmt.Sprintf("team%d/app%d", i%7, i)
	}
	return fmt.Sprintf("repo%05d", i)
}

// Generate writes the registry described by s into d.
func Generate(ctx context.Context, d storagedriver.StorageDriver, s Spec) (Stats, error) {
	if s.Workers <= 0 {
		s.Workers = 8
	}
	var (
		stats   Stats
		results = make([]Stats, s.Repos)
	)
	shared := make([]digest.Digest, s.SharedLayers)
	for i := range shared {
		dg, err := putBlob(ctx, d, fmt.Appendf(nil, "%s shared layer %d", s.Seed, i))
		if err != nil {
			return stats, err
		}
		shared[i] = dg
		stats.Blobs++
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(s.Workers)
	for r := range s.Repos {
		g.Go(func() error {
			st, err := repo(ctx, d, s, r, shared)
			results[r] = st
			return err
		})
	}
	err := g.Wait()
	for _, r := range results {
		stats.Blobs += r.Blobs
		stats.LayerLinks += r.LayerLinks
		stats.RevisionLinks += r.RevisionLinks
		stats.ReverseLinks += r.ReverseLinks
		stats.Referrers += r.Referrers
	}
	return stats, err
}

func repo(ctx context.Context, d storagedriver.StorageDriver, s Spec, r int, shared []digest.Digest) (Stats, error) {
	var st Stats
	name := RepoName(r)
	seen := map[string]bool{} // shared layers recur within a repository
	link := func(dg digest.Digest, kind reclaim.LinkKind) error {
		k := string(kind) + dg.String()
		if seen[k] {
			return nil
		}
		seen[k] = true
		if s.Reverse {
			if err := d.PutContent(ctx, layout.ReverseLinkPath(dg, name, kind), []byte(dg)); err != nil {
				return err
			}
			st.ReverseLinks++
		}
		p := layout.LayerLinkPath(name, dg)
		if kind == reclaim.LinkManifest {
			p = layout.RevisionLinkPath(name, dg)
			st.RevisionLinks++
		} else {
			st.LayerLinks++
		}
		return d.PutContent(ctx, p, []byte(dg))
	}
	for img := range s.Images {
		var layers []v1.Descriptor
		for l := range s.LayersPerImage {
			var dg digest.Digest
			if l < len(shared) {
				dg = shared[(r+img+l)%len(shared)]
			} else {
				var err error
				if dg, err = putBlob(ctx, d, fmt.Appendf(nil, "%s %s image %d layer %d", s.Seed, name, img, l)); err != nil {
					return st, err
				}
				st.Blobs++
			}
			if err := link(dg, reclaim.LinkLayer); err != nil {
				return st, err
			}
			layers = append(layers, v1.Descriptor{MediaType: v1.MediaTypeImageLayerGzip, Digest: dg, Size: 32})
		}
		m, err := putManifest(ctx, d, v1.Manifest{MediaType: v1.MediaTypeImageManifest,
			Config: v1.DescriptorEmptyJSON, Layers: layers,
			Annotations: map[string]string{"seed": fmt.Sprintf("%s %s %d", s.Seed, name, img)}})
		if err != nil {
			return st, err
		}
		st.Blobs++
		if err := link(m.Digest, reclaim.LinkManifest); err != nil {
			return st, err
		}
		if s.ReferrerEvery > 0 && img%s.ReferrerEvery == 0 {
			a, err := putManifest(ctx, d, v1.Manifest{MediaType: v1.MediaTypeImageManifest,
				ArtifactType: "application/vnd.reclaim.test", Config: v1.DescriptorEmptyJSON,
				Layers: []v1.Descriptor{v1.DescriptorEmptyJSON}, Subject: &m})
			if err != nil {
				return st, err
			}
			st.Blobs++
			if err := link(a.Digest, reclaim.LinkManifest); err != nil {
				return st, err
			}
			if s.Reverse {
				desc := v1.Descriptor{MediaType: a.MediaType, Digest: a.Digest, Size: a.Size, ArtifactType: "application/vnd.reclaim.test"}
				if err := referrers.New(d).Add(ctx, name, m.Digest, desc); err != nil {
					return st, err
				}
			}
			st.Referrers++
		}
	}
	return st, nil
}

func putManifest(ctx context.Context, d storagedriver.StorageDriver, m v1.Manifest) (v1.Descriptor, error) {
	m.SchemaVersion = 2
	b, err := json.Marshal(m)
	if err != nil {
		return v1.Descriptor{}, err
	}
	dg, err := putBlob(ctx, d, b)
	return v1.Descriptor{MediaType: m.MediaType, Digest: dg, Size: int64(len(b))}, err
}

func putBlob(ctx context.Context, d storagedriver.StorageDriver, b []byte) (digest.Digest, error) {
	dg := digest.NewDigestFromEncoded(digest.SHA256, fmt.Sprintf("%x", sha256.Sum256(b)))
	return dg, d.PutContent(ctx, layout.BlobDataPath(dg), b)
}
