package soak

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/reclaimer"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// gcStatus is the part of GET /gc/v1/status the soak reads.
type gcStatus struct {
	Reclaimer reclaimer.Status `json:"reclaimer"`
}

func status(ctx context.Context, r *registrytest.Registry) (gcStatus, error) {
	var st gcStatus
	resp, err := send(ctx, r, http.MethodGet, "/gc/v1/status", nil, nil)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// collectReport is the part of a collect's report the soak reads.
type collectReport struct {
	code             int
	ManifestsDeleted []digest.Digest `json:"manifests_deleted"`
	LayersUnlinked   []digest.Digest `json:"layers_unlinked"`
	BlobsDeleted     []digest.Digest `json:"blobs_deleted"`
	BytesFreed       int64           `json:"bytes_freed"`
	Kept             []struct {
		Digest digest.Digest `json:"digest"`
		Reason string        `json:"reason"`
	} `json:"kept"`
	Errors []struct {
		Code   string         `json:"code"`
		Detail map[string]any `json:"detail"`
	} `json:"errors"`
}

func (c *collectReport) unlinked(d v1.Hash) bool { return hasDigest(c.LayersUnlinked, d) }

func (c *collectReport) manifestDeleted(d v1.Hash) bool { return hasDigest(c.ManifestsDeleted, d) }

func hasDigest(ds []digest.Digest, d v1.Hash) bool {
	for _, x := range ds {
		if x.String() == d.String() {
			return true
		}
	}
	return false
}

// keptBecause is the reason the collect gave for keeping d ("" if none).
func (c *collectReport) keptBecause(d v1.Hash) string {
	for _, k := range c.Kept {
		if k.Digest.String() == d.String() {
			return k.Reason
		}
	}
	return ""
}

// collectRefused is a collect answered with an error body.
type collectRefused struct{ reason string }

func (e *collectRefused) Error() string { return e.reason }

// collect runs one real, synchronous collection through r's GC API and returns
// the HTTP status and the report's bytes_freed.
func collect(ctx context.Context, r *registrytest.Registry, repo string) (int, int64, error) {
	rep, err := collectFull(ctx, r, repo)
	switch {
	case rep == nil:
		return 0, 0, err
	case err != nil:
		return rep.code, 0, err
	}
	return rep.code, rep.BytesFreed, nil
}

// collectFull runs one real (dry_run=false), synchronous collection and
// returns its report; a collect answered with an error body is a
// *collectRefused.
func collectFull(ctx context.Context, r *registrytest.Registry, repo string) (*collectReport, error) {
	start := time.Now().Format("15:04:05.000")
	resp, err := send(ctx, r, http.MethodPost, "/gc/v1/repositories/"+repo+"/collect?dry_run=false", nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	rep := &collectReport{code: resp.StatusCode}
	_ = json.NewDecoder(resp.Body).Decode(rep)
	if resp.StatusCode == 200 {
		diagf("collect %s via %s (started %s): manifests_deleted=%v layers_unlinked=%v blobs_deleted=%v kept=%v", repo, r.URL, start, rep.ManifestsDeleted, rep.LayersUnlinked, rep.BlobsDeleted, rep.Kept)
	}
	if resp.StatusCode >= 400 && len(rep.Errors) > 0 {
		reason := rep.Errors[0].Code
		if r, ok := rep.Errors[0].Detail["reason"].(string); ok {
			reason += " " + r
		}
		return rep, &collectRefused{reason}
	}
	return rep, nil
}

// collectUntilRun collects repo through r, waiting out a collection another
// collector holds (409) for up to five seconds.
func collectUntilRun(ctx context.Context, r *registrytest.Registry, repo string) (*collectReport, error) {
	var rep *collectReport
	var err error
	poll(ctx, 250*time.Millisecond, 5*time.Second, func() bool {
		rep, err = collectFull(ctx, r, repo)
		return rep == nil || rep.code != http.StatusConflict
	})
	return rep, err
}
