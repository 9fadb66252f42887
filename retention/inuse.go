package retention

import (
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
)

// sourceRe is what a source may be called: short, path- and key-safe.
var sourceRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidateSource checks an in-use source name ("prod-eu", "gitops.main").
func ValidateSource(name string) error {
	if !sourceRe.MatchString(name) {
		return fmt.Errorf("%w: source %q: 1-128 of [A-Za-z0-9._-], starting with a letter or digit", ErrInvalid, name)
	}
	return nil
}

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

// ValidateImages checks every image: validName is the registry's name check
// (the reference grammar, storage-safe), and digests must parse.
func ValidateImages(images []Image, validName func(string) error) error {
	for i, im := range images {
		if err := validName(im.Repository); err != nil {
			return fmt.Errorf("%w: images[%d]: %v", ErrInvalid, i, err)
		}
		if err := im.Digest.Validate(); err != nil {
			return fmt.Errorf("%w: images[%d] (%s): digest %q: %v", ErrInvalid, i, im.Repository, im.Digest, err)
		}
	}
	return nil
}
