// Package pin is the pins of deploy-aware retention: a version of a
// repository (a tag or a manifest digest, Ref) that an operator keeps on
// purpose, until an optional expiry. A digest pin keeps that manifest
// from the collector (through gc's Pinner seam) and from retention; a tag
// pin keeps the tag from retention. The package holds the words and their
// validation and does no I/O: retention/redisstore stores pins,
// registry/gcapi serves them (docs/api.md, "Pins").
package pin

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// maxNote bounds a pin's note, in bytes.
const maxNote = 1024

// Pin keeps one version of a repository: a digest pin keeps that manifest
// from the collector (an untagged manifest it pins is kept as "pinned") and
// from retention; a tag pin keeps the tag from retention. A pin whose
// ExpiresAt has passed protects nothing.
type Pin struct {
	Repository string     `json:"repository"`
	Ref        string     `json:"ref"`
	Note       string     `json:"note,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
}

// Active reports whether the pin protects at now.
func (p Pin) Active(now time.Time) bool { return p.ExpiresAt == nil || now.Before(*p.ExpiresAt) }

// Request is the body of a pin PUT: an optional note and an optional
// expiry, as a time or as a duration from now (not both).
type Request struct {
	Note      string     `json:"note"`
	ExpiresAt *time.Time `json:"expires_at"`
	ExpiresIn string     `json:"expires_in"`
}

// New validates req and builds the pin of ref in repo, created at now.
func New(repo string, ref Ref, req Request, now time.Time) (Pin, error) {
	p := Pin{Repository: repo, Ref: ref.String(), Note: req.Note, CreatedAt: now.UTC()}
	if len(req.Note) > maxNote || !utf8.ValidString(req.Note) {
		return Pin{}, fmt.Errorf("%w: note: at most %d bytes of UTF-8", ErrInvalid, maxNote)
	}
	switch {
	case req.ExpiresAt != nil && req.ExpiresIn != "":
		return Pin{}, fmt.Errorf("%w: give expires_at or expires_in, not both", ErrInvalid)
	case req.ExpiresAt != nil:
		t := req.ExpiresAt.UTC()
		p.ExpiresAt = &t
	case req.ExpiresIn != "":
		d, err := time.ParseDuration(req.ExpiresIn)
		if err != nil {
			return Pin{}, fmt.Errorf("%w: expires_in %q: a duration such as 72h", ErrInvalid, req.ExpiresIn)
		}
		t := now.Add(d).UTC()
		p.ExpiresAt = &t
	}
	if err := p.Live(now); err != nil {
		return Pin{}, err
	}
	return p, nil
}

// Live returns ErrExpired when p's expiry is not after now: such a pin
// protects nothing.
func (p Pin) Live(now time.Time) error {
	if p.ExpiresAt != nil && !p.ExpiresAt.After(now) {
		return fmt.Errorf("%w: the expiry %s is not in the future (at %s): give a later expires_at or a longer expires_in",
			ErrExpired, p.ExpiresAt.Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
