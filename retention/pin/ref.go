package pin

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/opencontainers/go-digest"
)

// tagRe is the tag grammar of the distribution reference.
var tagRe = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)

// Ref names one version of a repository: a tag or a manifest digest,
// exactly one of them.
type Ref struct {
	Tag    string
	Digest digest.Digest
}

// ParseRef reads a tag ("v1.2") or a digest ("sha256:<hex>").
func ParseRef(s string) (Ref, error) {
	if tagRe.MatchString(s) {
		return Ref{Tag: s}, nil
	}
	d, err := digest.Parse(s)
	if err != nil && strings.Contains(s, ":") {
		// no tag holds a ':': this was meant as a digest
		return Ref{}, fmt.Errorf("%w: %q: %v", ErrInvalidDigest, s, err)
	}
	if err != nil {
		return Ref{}, fmt.Errorf("%w: %q is neither a tag nor a digest", ErrInvalid, s)
	}
	return Ref{Digest: d}, nil
}

func (r Ref) String() string {
	if r.Tag != "" {
		return r.Tag
	}
	return r.Digest.String()
}
