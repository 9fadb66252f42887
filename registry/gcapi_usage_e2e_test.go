package registry_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

type usageTop struct {
	By           string          `json:"by"`
	Top          int             `json:"top"`
	Ranked       int64           `json:"ranked"`
	Repositories []reclaim.Usage `json:"repositories"`
}

func (g *gcRegistry) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	code, _, body := g.send(t, http.MethodGet, path, "")
	return code, body
}

func (g *gcRegistry) usage(t *testing.T, repo, query string) reclaim.Usage {
	t.Helper()
	code, body := g.get(t, "/gc/v1/repositories/"+repo+"/usage"+query)
	var u reclaim.Usage
	if code != http.StatusOK || json.Unmarshal(body, &u) != nil {
		t.Fatalf("usage of %s%s: %d %s", repo, query, code, body)
	}
	return u
}

// TestUsageEndpoints: an estimate is made on request (refresh=true) or by
// a collect, read back, ranked; every repository name reaches its own,
// names that end like another route included.
func TestUsageEndpoints(t *testing.T) {
	g := startGC(t)
	repos := []string{"team/app", "x/pins", "y/usage", "z/retention/plans"}
	for _, repo := range repos {
		deletable(t, g, repo)
	}
	code, body := g.get(t, "/gc/v1/repositories/team/app/usage")
	if c, _ := decodeErr(t, body); code != http.StatusNotFound || c != "USAGE_UNKNOWN" {
		t.Fatalf("usage before any estimate: %d %s; want 404 USAGE_UNKNOWN", code, body)
	}
	code, body = g.get(t, "/gc/v1/repositories/no/such/usage")
	if c, _ := decodeErr(t, body); code != http.StatusNotFound || c != "NAME_UNKNOWN" {
		t.Fatalf("usage of a missing repository: %d %s; want 404 NAME_UNKNOWN", code, body)
	}
	est := map[string]reclaim.Usage{}
	for _, repo := range repos {
		u := g.usage(t, repo, "?refresh=true")
		if u.Repository != repo || u.ReclaimableBytes == 0 || u.ExclusiveBytes < u.ReclaimableBytes || u.ManifestsDeletable != 1 ||
			!u.LinkDBComplete || len(u.Blockers) != 0 {
			t.Fatalf("estimate of %s: %+v; want its untagged image reclaimable", repo, u)
		}
		if stored := g.usage(t, repo, ""); stored.RunID != u.RunID {
			t.Fatalf("stored estimate of %s is run %s, the refresh was %s", repo, stored.RunID, u.RunID)
		}
		est[repo] = u
	}
	for _, by := range []string{"reclaimable", "exclusive"} {
		code, body := g.get(t, "/gc/v1/usage?top=3&by="+by)
		var top usageTop
		if code != http.StatusOK || json.Unmarshal(body, &top) != nil || top.By != by || top.Ranked != 4 || len(top.Repositories) != 3 {
			t.Fatalf("top 3 by %s: %d %s", by, code, body)
		}
		for i := 1; i < len(top.Repositories); i++ {
			a, b := top.Repositories[i-1], top.Repositories[i]
			if by == "reclaimable" && a.ReclaimableBytes < b.ReclaimableBytes || by == "exclusive" && a.ExclusiveBytes < b.ExclusiveBytes {
				t.Fatalf("top by %s is not in order: %s", by, body)
			}
		}
	}
	// A real collect leaves its own record: nothing left to reclaim.
	rep := g.collect(t, "x/pins")
	after := g.usage(t, "x/pins", "")
	if after.RunID != rep.RunID || after.ReclaimableBytes != 0 || after.ExclusiveBytes != est["x/pins"].ExclusiveBytes-rep.BytesFreed {
		t.Fatalf("after the collect of x/pins (freed %d): %+v; before %+v", rep.BytesFreed, after, est["x/pins"])
	}
	code, body = g.get(t, "/gc/v1/usage")
	var top usageTop
	if code != http.StatusOK || json.Unmarshal(body, &top) != nil || top.Top != 20 || top.Repositories[len(top.Repositories)-1].Repository != "x/pins" {
		t.Fatalf("default top after the collect: %d %s; want x/pins last", code, body)
	}
}

// TestUsageRequestErrors: every malformed usage request is a 4xx with the
// API's typed error, and changes nothing.
func TestUsageRequestErrors(t *testing.T) {
	g := startGC(t)
	deletable(t, g, "team/app")
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/gc/v1/usage?top=0", 400, "PARAM_INVALID"},
		{"GET", "/gc/v1/usage?top=1001", 400, "PARAM_INVALID"},
		{"GET", "/gc/v1/usage?top=01", 400, "PARAM_INVALID"},
		{"GET", "/gc/v1/usage?top=-1", 400, "PARAM_INVALID"},
		{"GET", "/gc/v1/usage?top=ten", 400, "PARAM_INVALID"},
		{"GET", "/gc/v1/usage?by=size", 400, "PARAM_INVALID"},
		{"GET", "/gc/v1/usage?by=Reclaimable", 400, "PARAM_INVALID"},
		{"GET", "/gc/v1/usage?top=1&top=2", 400, "PARAM_INVALID"},
		{"GET", "/gc/v1/usage?limit=5", 400, "PARAM_INVALID"},
		{"GET", "/gc/v1/usage?top=%zz", 400, "PARAM_INVALID"},
		{"POST", "/gc/v1/usage", 405, "UNSUPPORTED"},
		{"GET", "/gc/v1/repositories/team/app/usage?refresh=yes", 400, "PARAM_INVALID"},
		{"GET", "/gc/v1/repositories/team/app/usage?refresh=true&refresh=true", 400, "PARAM_INVALID"},
		{"GET", "/gc/v1/repositories/team/app/usage?dry_run=false", 400, "PARAM_INVALID"},
		{"POST", "/gc/v1/repositories/team/app/usage", 405, "UNSUPPORTED"},
		{"GET", "/gc/v1/repositories/Team/App/usage", 400, "NAME_INVALID"},
		{"GET", "/gc/v1/repositories//usage", 400, "NAME_INVALID"},
	} {
		code, _, body := g.send(t, c.method, c.path, "")
		if got, _ := decodeErr(t, body); code != c.status || got != c.code {
			t.Errorf("%s %s: %d %s; want %d %s", c.method, c.path, code, body, c.status, c.code)
		}
	}
	if code, body := g.get(t, "/gc/v1/repositories/team/app/usage"); code != http.StatusNotFound {
		t.Fatalf("after the bad requests: %d %s; want no estimate made", code, body)
	}
}

// TestReclaimerRefreshesUsageE2E: with the reclaimer on, repositories get
// their estimates without anybody asking, and refreshed once older than
// usagemaxage (the first is made while the push is within the window:
// nothing reclaimable yet); usagerefresh: 0 turns that off.
func TestReclaimerRefreshesUsageE2E(t *testing.T) {
	for _, refresh := range []int{4, 0} {
		t.Run(fmt.Sprint("usagerefresh=", refresh), func(t *testing.T) {
			opts := reclaimOptions(t, e2eWindow, "")
			opts["reclaimer"] = map[string]any{"enabled": true, "interval": "50ms", "usagerefresh": refresh, "usagemaxage": "200ms"}
			g := completeGC(t, registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", opts)))
			deletable(t, g, "auto/app") // waits out the window: many ticks
			deadline := time.Now().Add(10 * time.Second)
			for {
				code, body := g.get(t, "/gc/v1/repositories/auto/app/usage")
				switch {
				case refresh == 0 && code != http.StatusNotFound:
					t.Fatalf("usagerefresh: 0, yet the estimate is %d %s", code, body)
				case refresh == 0:
					return
				case code == http.StatusOK:
					var u reclaim.Usage
					if json.Unmarshal(body, &u) != nil {
						t.Fatalf("the reclaimer's estimate: %s", body)
					}
					if u.ReclaimableBytes > 0 && u.ManifestsDeletable == 1 {
						return
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("no estimate with the untagged image reclaimable 10 s after the window: %d %s", code, body)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
