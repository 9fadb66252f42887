package retention

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	"github.com/opencontainers/go-digest"
)

// Plan statuses.
const (
	PlanReady   = "ready"   // candidates listed; apply may delete them
	PlanSkipped = "skipped" // the repository was left out (Skip says why)
)

// Plan is a preview: every version of one repository with what the policy
// decided, stored so that teams can read it before it is applied. Its
// store (retention/redisstore) is Redis, so every instance reads and applies
// it (unlike a GC plan, collector.Plan, which lives in the memory of the
// instance that made it).
type Plan struct {
	ID         string    `json:"id"`
	Repository string    `json:"repository"`
	CreatedAt  time.Time `json:"created_at"`
	// Policy is the policy in force (configuration plus Override);
	// PolicyFingerprint identifies it for apply.
	Policy            Policy         `json:"policy"`
	PolicyFingerprint string         `json:"policy_fingerprint"`
	Override          PolicyOverride `json:"override"`
	Status            string         `json:"status"`
	Skip              *Skip          `json:"skip,omitempty"`
	// InUseAsOf is the oldest update time of the sources read.
	InUseAsOf time.Time `json:"inuse_as_of"`
	// InUse lists the manifests of this repository the index declared at
	// the plan's last read of it, sorted: apply compares the index it
	// reads with them (ApplyReport.InUseChanged). Absent (a plan stored
	// by an older version): apply counts the index as changed.
	InUse []digest.Digest `json:"inuse"`
	Decision
	// Dropped lists candidates the re-read of the in-use index after the
	// build protected (they, or a newer version, became in use).
	Dropped []Entry `json:"dropped"`
}

var planIDRe = regexp.MustCompile(`^[0-9a-f]{24}$`)

// NewPlanID returns a random plan id: 24 hex digits.
func NewPlanID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ValidatePlanID checks a plan id's shape.
func ValidatePlanID(id string) error {
	if !planIDRe.MatchString(id) {
		return fmt.Errorf("%w: plan id %q", ErrInvalid, id)
	}
	return nil
}

// CheckApplicable refuses a plan that is skipped, older than maxAge at now,
// or made under a policy other than current.
func CheckApplicable(p *Plan, current Policy, now time.Time, maxAge time.Duration) error {
	switch {
	case p.Status != PlanReady:
		return fmt.Errorf("%w: %s", ErrPlanSkipped, p.ID)
	case now.Sub(p.CreatedAt) > maxAge:
		return fmt.Errorf("%w: %s was made at %s, more than %v ago", ErrPlanExpired, p.ID, p.CreatedAt.Format(time.RFC3339), maxAge)
	case current.fingerprint() != p.PolicyFingerprint:
		return fmt.Errorf("%w: plan %s has policy %s, now %s", ErrPolicyChanged, p.ID, p.PolicyFingerprint, current.fingerprint())
	}
	return nil
}
