package gc

import "github.com/opencontainers/go-digest"

// Snapshot is everything a decision is built from: one read of the
// repository (the collector's takeSnapshot fills it in).
type Snapshot struct {
	Repo      string
	Tags      map[string]digest.Digest          // tag -> current manifest
	TagIndex  map[digest.Digest][]string        // manifest -> tags whose history lists it
	Revisions map[digest.Digest]*Manifest       // manifest revisions
	Layers    map[digest.Digest]bool            // layer links
	Referrers map[digest.Digest][]digest.Digest // referrer -> subjects in the referrers index
}

// NewSnapshot returns an empty snapshot of repo.
func NewSnapshot(repo string) *Snapshot {
	return &Snapshot{
		Repo:      repo,
		Tags:      map[string]digest.Digest{},
		TagIndex:  map[digest.Digest][]string{},
		Revisions: map[digest.Digest]*Manifest{},
		Layers:    map[digest.Digest]bool{},
		Referrers: map[digest.Digest][]digest.Digest{},
	}
}

// Manifest is one manifest revision as the decision sees it.
type Manifest struct {
	Digest    digest.Digest
	MediaType string
	Known     bool            // parsed by a registered handler; an unknown one references anything
	Refs      []digest.Digest // config and layers, or an index's children
	Subject   digest.Digest   // OCI subject, "" when none
	Size      int64           // of the content read
}
