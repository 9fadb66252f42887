package soak

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// diag is a log of collects and acknowledged PUTs, printed next to a LOST
// DATA report: which collect removed what, and when.
var diag struct {
	mu     sync.Mutex
	events []string
}

func diagf(format string, args ...any) {
	diag.mu.Lock()
	defer diag.mu.Unlock()
	diag.events = append(diag.events, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// diagAbout lists the events that mention any of words.
func diagAbout(words ...string) string {
	diag.mu.Lock()
	defer diag.mu.Unlock()
	var b strings.Builder
	for _, e := range diag.events {
		for _, w := range words {
			if w != "" && strings.Contains(e, w) {
				b.WriteString("\n    " + e)
				break
			}
		}
	}
	return b.String()
}

func (ri *rawImage) blobDigests() []string {
	var out []string
	for _, b := range ri.blobs {
		out = append(out, b.d.String())
	}
	return out
}

// lostDigest is the sha256 digest an error names, if any.
func lostDigest(err error) string {
	s := err.Error()
	i := strings.Index(s, "sha256:")
	if i < 0 || len(s) < i+71 {
		return ""
	}
	return s[i : i+71]
}

// explainLeaks logs, for each blob rep calls reclaimable (no repository
// links it, older than W), what kept it from the reclaimer: whether it is
// queued and when it is due, its access record, fence and tombstone, when
// its data was written, what the soak saw happen to it, and how many
// enqueues each instance failed (a failed enqueue is a leak only the
// slow-path sweep finds).
func (c *cluster) explainLeaks(ctx context.Context, t *testing.T, rep *linkdb.Report) {
	t.Helper()
	rc := c.tracker.Client()
	for _, f := range rep.Findings {
		if f.Kind != linkdb.Reclaimable {
			continue
		}
		d := f.Digest.String()
		key := c.prefix + "{" + d + "}"
		queued := "not queued"
		if s, err := rc.ZScore(ctx, c.prefix+"review", d).Result(); err == nil {
			queued = "queued, due " + time.UnixMilli(int64(s)).UTC().Format(time.RFC3339Nano)
		}
		written := "?"
		if fi, err := c.raw.Stat(ctx, f.Path+"/data"); err == nil {
			written = fi.ModTime().UTC().Format(time.RFC3339Nano)
		}
		t.Logf("LEAK %s (%d bytes): %s; data written %s; access %q (ttl %v); fence ttl %v; tombstone %q%s",
			d, f.Size, queued, written, rc.Get(ctx, key+":a").Val(), rc.PTTL(ctx, key+":a").Val(),
			rc.PTTL(ctx, key+":f").Val(), rc.Get(ctx, key+":gone").Val(), diagAbout(d))
	}
	for _, p := range c.procs {
		if p == nil || p.DebugURL == "" {
			continue
		}
		resp, err := http.Get(p.DebugURL + "/metrics")
		if err != nil {
			t.Logf("metrics of %s: %v", p.URL, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if strings.Contains(line, "review_enqueued_total") && !strings.HasPrefix(line, "#") {
				t.Logf("%s: %s", p.URL, line)
			}
		}
	}
}

// sweepLeftovers judges what the final pass left unreferenced (rep). The
// review queue should have brought every such blob to a reclaimer; a blob
// it missed is explained and counted (a queue miss, logged as QUEUE MISS),
// and must then be found by the documented slow path, `registry gc sweep
// --enqueue`, and deleted by a reclaimer. The test fails on a blob that
// survives that too: a leak nothing in the product reclaims.
func (c *cluster) sweepLeftovers(ctx context.Context, t *testing.T, rep *linkdb.Report) *linkdb.Report {
	t.Helper()
	n := rep.Counts[linkdb.Reclaimable]
	if n == 0 {
		return rep
	}
	t.Logf("QUEUE MISS: %d unreferenced blobs older than W survived the final collect and reclaimer pass, not in the review queue; running gc sweep --enqueue", n)
	c.explainLeaks(ctx, t, rep)
	t.Logf("sweep: %s", sweepEnqueue(t, c.procs[0].ConfigPath))
	c.drainQueue(ctx, t)
	rep = linkdbVerify(ctx, t, c.raw)
	t.Logf("linkdb verify after the sweep: %s", summarize(rep))
	judgeLinkDB(t, "after the sweep", rep)
	if n := rep.Counts[linkdb.Reclaimable]; n > 0 {
		t.Errorf("%d unreferenced blobs older than W survived the final pass and gc sweep --enqueue", n)
		c.explainLeaks(ctx, t, rep)
	}
	return rep
}
