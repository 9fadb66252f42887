package retention

import (
	"fmt"
	"regexp"

	"github.com/reclaim-registry/reclaim/retention/inuse"
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

// ValidateImages checks every image: validName is the registry's name check
// (the reference grammar, storage-safe), and digests must parse.
func ValidateImages(images []inuse.Image, validName func(string) error) error {
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
