package inuse

import (
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
)

// Image is one exact version in use: a repository of this registry and a
// manifest digest.
type Image struct {
	Repository string        `json:"repository"`
	Digest     digest.Digest `json:"digest"`
}

func (i Image) String() string { return i.Repository + "@" + i.Digest.String() }

// Source is what one deploy source (a cluster, a GitOps repository, the
// preview environments) last declared: when, and how many images.
type Source struct {
	Name      string    `json:"name"`
	UpdatedAt time.Time `json:"updated_at"`
	Images    int       `json:"images"`
}

// SortImages sorts and de-duplicates images, in place.
func SortImages(images []Image) []Image {
	sort.Slice(images, func(i, j int) bool { return images[i].String() < images[j].String() })
	out := images[:0]
	for i, im := range images {
		if i == 0 || im != images[i-1] {
			out = append(out, im)
		}
	}
	return out
}
