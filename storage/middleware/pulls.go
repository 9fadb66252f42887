package middleware

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// Pulls for retention's pulled_within (redisstate/pulls): a manifest GET
// reads the manifest's data through Reader (Distribution's getContent),
// and that read names the manifest pulled. The record is retention's alone: the access records GC
// relies on are written as for any read, whoever pulls.

// pullDedup is how long one instance does not record a manifest's pull
// again: pulled_within counts days, so a minute costs nothing and a hot
// tag costs one Redis round trip a minute.
const pullDedup = time.Minute

// userNameKey is where Distribution's app keeps the authenticated account
// in the request context it hands down to storage (its handlers'
// "auth.user.name").
const userNameKey = "auth.user.name"

// pullFilter says which clients' pulls do not count (config's
// retention.ignorepullsfrom).
type pullFilter struct {
	agents   []string // lower case
	accounts map[string]bool
}

func newPullFilter(c config.IgnorePulls) pullFilter {
	f := pullFilter{accounts: map[string]bool{}}
	for _, a := range c.UserAgents {
		f.agents = append(f.agents, strings.ToLower(a))
	}
	for _, a := range c.Accounts {
		f.accounts[a] = true
	}
	return f
}

// ignored reports whether the pull r made (as account) does not count.
func (f pullFilter) ignored(r *http.Request, account string) bool {
	if account != "" && f.accounts[account] {
		return true
	}
	ua := strings.ToLower(r.UserAgent())
	for _, a := range f.agents {
		if strings.Contains(ua, a) {
			return true
		}
	}
	return false
}

// notePull records a pull of manifest d when ctx is a manifest GET by a
// client whose pulls count. Best effort: a failure is logged, the pull is
// served.
func (d *driver) notePull(ctx context.Context, m digest.Digest) {
	e := d.env
	if e.Pulls == nil || accessRecordsOff(ctx) {
		return
	}
	r, _ := ctx.Value("http.request").(*http.Request)
	if r == nil || r.Method != http.MethodGet {
		return
	}
	info := requestOf(ctx)
	if !info.pull || info.repo == "" {
		return
	}
	account, _ := ctx.Value(userNameKey).(string)
	if e.ignorePulls.ignored(r, account) {
		metricPulls.WithLabelValues("ignored").Inc()
		return
	}
	o := []reclaim.Object{{Blob: m, Repo: info.repo, Kind: reclaim.LinkManifest}}
	if e.pullDedup.recent(o) {
		return
	}
	start := time.Now()
	if err := e.Pulls.Record(ctx, info.repo, m); err != nil {
		metricPulls.WithLabelValues("failed").Inc()
		rlog.From(ctx).WithError(err).Warn("reclaim: could not record a pull for retention")
		return
	}
	metricPulls.WithLabelValues("recorded").Inc()
	e.pullDedup.record(o, start)
}
