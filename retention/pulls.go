package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
)

// errPullsOff: a policy asks for pulled_within but this registry records no
// pulls (retention.pulledwithin is not configured): without the record,
// every version would look never pulled (an ErrInvalid).
var errPullsOff = fmt.Errorf("%w: pulled_within needs retention.pulledwithin in the configuration (pulls are recorded only then)", ErrInvalid)

// pulledSince keeps the manifests of pulls pulled at or after since.
func pulledSince(pulls map[digest.Digest]time.Time, since time.Time) map[digest.Digest]bool {
	out := map[digest.Digest]bool{}
	for d, at := range pulls {
		if !at.Before(since) {
			out[d] = true
		}
	}
	return out
}

// versionsPulled maps the manifests of repo pulled within p.PulledWithin
// at now to its versions (a version is pulled when its manifest is, or one
// its index lists). A pull record that cannot be read skips the
// repository: without it, a version pulled an hour ago would be a
// candidate.
func versionsPulled(ctx context.Context, pr PullReader, m Manifests, repo string, versions []Version, p Policy, now time.Time) (map[digest.Digest]bool, *Skip, error) {
	if p.PulledWithin == 0 {
		return nil, nil, nil
	}
	if pr == nil {
		return nil, nil, errPullsOff
	}
	pulls, err := pr.Pulled(ctx, repo)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, &Skip{Reason: SkipPullsUnreadable, Detail: err.Error()}, nil
	}
	out, err := versionsInUse(ctx, m, repo, versions, pulledSince(pulls, now.Add(-time.Duration(p.PulledWithin))))
	var ae *AbortError
	if errors.As(err, &ae) {
		// a pulled manifest that cannot be read: its version is unknown
		return nil, &Skip{Reason: SkipPullsUnreadable, Detail: ae.Detail}, nil
	}
	return out, nil, err
}
