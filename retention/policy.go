package retention

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"time"
)

// Policy is what retention keeps of one repository. The registry's
// configuration gives the defaults (the reclaim middleware's `retention:`
// block); a request may override any field (Override).
type Policy struct {
	// KeepNewest (N) protects the newest N versions of a repository in
	// which no version is in use: the count policy being replaced.
	KeepNewest int `json:"keep_newest"`
	// RollbackSlack (K) protects the K versions just below the oldest
	// in-use version.
	RollbackSlack int `json:"rollback_slack"`
	// MinAge is the retention age: a version younger than it is never a
	// candidate, whatever else holds.
	MinAge Duration `json:"min_age"`
	// Include and Exclude are tag patterns (path.Match syntax: "v*",
	// "nightly-*"). A tag is managed when it matches an Include pattern
	// (no Include: every tag) and no Exclude pattern. Tags not managed are
	// never deleted and do not count as versions.
	Include []string `json:"include"`
	Exclude []string `json:"exclude"`
	// Sources names the in-use sources that must be readable and non-empty
	// for this repository to be planned; none: every source in the index.
	Sources []string `json:"sources"`
	// Cap bounds the candidates of one plan; a larger plan is trimmed to
	// its oldest Cap candidates.
	Cap int `json:"cap"`
	// PulledWithin keeps a version whose manifest (or one its index
	// lists) was pulled within it, by a client whose pulls count
	// (retention.ignorepullsfrom); 0: pulls keep nothing. Left out of the
	// JSON when 0, so plans made before it existed keep their fingerprint.
	PulledWithin Duration `json:"pulled_within,omitempty"`
}

// PolicyOverride is a request's change to the configured policy: each field
// given replaces the default.
type PolicyOverride struct {
	KeepNewest    *int      `json:"keep_newest,omitempty"`
	RollbackSlack *int      `json:"rollback_slack,omitempty"`
	MinAge        *Duration `json:"min_age,omitempty"`
	Include       *[]string `json:"include,omitempty"`
	Exclude       *[]string `json:"exclude,omitempty"`
	Sources       *[]string `json:"sources,omitempty"`
	Cap           *int      `json:"cap,omitempty"`
	PulledWithin  *Duration `json:"pulled_within,omitempty"`
}

// Apply returns p with o's fields, validated.
func (o PolicyOverride) Apply(p Policy) (Policy, error) {
	set := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	set(&p.KeepNewest, o.KeepNewest)
	set(&p.RollbackSlack, o.RollbackSlack)
	set(&p.Cap, o.Cap)
	if o.MinAge != nil {
		p.MinAge = *o.MinAge
	}
	if o.PulledWithin != nil {
		p.PulledWithin = *o.PulledWithin
	}
	for _, f := range []struct {
		dst *[]string
		v   *[]string
	}{{&p.Include, o.Include}, {&p.Exclude, o.Exclude}, {&p.Sources, o.Sources}} {
		if f.v != nil {
			*f.dst = append([]string(nil), (*f.v)...)
		}
	}
	return p, p.Validate()
}

// Validate checks the policy: counts not negative, a positive cap and
// retention age, well-formed patterns and source names.
func (p Policy) Validate() error {
	switch {
	case p.KeepNewest < 0:
		return fmt.Errorf("%w: keep_newest must not be negative", ErrInvalid)
	case p.RollbackSlack < 0:
		return fmt.Errorf("%w: rollback_slack must not be negative", ErrInvalid)
	case p.Cap <= 0:
		return fmt.Errorf("%w: cap must be positive", ErrInvalid)
	case p.MinAge <= 0:
		return fmt.Errorf("%w: min_age must be a positive duration", ErrInvalid)
	case p.PulledWithin < 0:
		return fmt.Errorf("%w: pulled_within must not be negative", ErrInvalid)
	}
	for _, pat := range append(append([]string{}, p.Include...), p.Exclude...) {
		if _, err := path.Match(pat, ""); err != nil || pat == "" {
			return fmt.Errorf("%w: tag pattern %q", ErrInvalid, pat)
		}
	}
	for _, s := range p.Sources {
		if err := ValidateSource(s); err != nil {
			return err
		}
	}
	return nil
}

// manages reports whether the policy manages tag.
func (p Policy) manages(tag string) bool {
	match := func(pats []string) bool {
		for _, pat := range pats {
			if ok, _ := path.Match(pat, tag); ok {
				return true
			}
		}
		return false
	}
	return (len(p.Include) == 0 || match(p.Include)) && !match(p.Exclude)
}

// fingerprint identifies the policy: apply refuses a plan whose policy's
// fingerprint is not the one in force now.
func (p Policy) fingerprint() string {
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Duration is a time.Duration written as "720h" in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%w: a duration is a string such as \"2160h\"", ErrInvalid)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%w: duration %q: %v", ErrInvalid, s, err)
	}
	*d = Duration(v)
	return nil
}
