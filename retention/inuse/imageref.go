package inuse

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
)

// ImageRef is a parsed image reference: registry host, repository path,
// and a tag and/or a digest. With both, the digest is what runs.
type ImageRef struct {
	Host, Path, Tag string
	Digest          digest.Digest
}

// ParseImage parses a reference as Kubernetes does (the Docker
// normalization: "nginx" is docker.io/library/nginx:latest).
func ParseImage(s string) (ImageRef, error) {
	n, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return ImageRef{}, fmt.Errorf("%w: image %q: %v", ErrInvalid, s, err)
	}
	r := ImageRef{Host: reference.Domain(n), Path: reference.Path(n)}
	if t, ok := n.(reference.Tagged); ok {
		r.Tag = t.Tag()
	}
	if d, ok := n.(reference.Digested); ok {
		r.Digest = d.Digest()
	}
	if r.Tag == "" && r.Digest == "" {
		r.Tag = "latest"
	}
	return r, nil
}

// Override is one Kustomize `images:` entry.
type Override struct {
	Name    string `json:"name"`
	NewName string `json:"newName"`
	NewTag  string `json:"newTag"`
	Digest  string `json:"digest"`
}

// Apply rewrites image by o when o names it, as Kustomize's images
// transformer does: the name as written (without tag or digest) must be
// o.Name, or normalize to the same repository; newName replaces the name,
// newTag the tag, digest replaces tag and digest.
func (o Override) Apply(image string) (string, bool) {
	name, tag, dg := splitImage(image)
	if name != o.Name && !sameRepository(name, o.Name) {
		return image, false
	}
	if o.NewName != "" {
		name = o.NewName
	}
	switch {
	case o.Digest != "":
		tag, dg = "", o.Digest
	case o.NewTag != "":
		tag, dg = o.NewTag, ""
	}
	out := name
	if tag != "" {
		out += ":" + tag
	}
	if dg != "" {
		out += "@" + dg
	}
	return out, true
}

// splitImage splits "host:5000/a/b:tag@sha256:..." into name, tag, digest.
func splitImage(s string) (name, tag, dg string) {
	if i := strings.IndexByte(s, '@'); i >= 0 {
		s, dg = s[:i], s[i+1:]
	}
	if i := strings.LastIndexByte(s, ':'); i > strings.LastIndexByte(s, '/') {
		return s[:i], s[i+1:], dg
	}
	return s, "", dg
}

func sameRepository(a, b string) bool {
	na, err1 := reference.ParseNormalizedNamed(a)
	nb, err2 := reference.ParseNormalizedNamed(b)
	return err1 == nil && err2 == nil && na.Name() == nb.Name()
}
