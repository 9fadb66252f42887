package gcapi

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate/usage"
)

// Usage, the reclaimable-bytes estimates (gc/collector/usage.go, kept by
// redisstate/usage's Store):
//
//	GET /gc/v1/repositories/<name>/usage[?refresh=true]   one repository's estimate
//	GET /gc/v1/usage[?top=N&by=reclaimable|exclusive]     the repositories ranked highest
//
// The stored estimate needs "pull" on the repository, as a run's report
// does; refresh=true makes a new one now (a dry run: one repository's
// cost) and needs "delete", as a dry-run collect does. The ranking spans
// repositories, so it needs Distribution's catalog scope
// (registry:catalog:*), as the in-use index does; it reads only the
// rankings and the records they name, never the registry.
//
// The name is everything before the last "/usage", and this route is
// tried before the pins and retention ones: every repository name reaches
// its estimate ("x/pins/usage" is the usage of "x/pins"). A GET of a pin
// named "usage" is therefore read from the list of pins
// (GET .../pins); PUT and DELETE of it are not affected.

// Bounds of ?top=.
const (
	defaultUsageTop = 20
	maxUsageTop     = 1000
)

// usageQuery parses a strict query (strictQuery) of the known parameters.
func usageQuery(raw string, known ...string) (map[string]string, error) {
	return strictQuery(raw, func(k string) bool { return slices.Contains(known, k) })
}

func (h *API) repoUsage(w http.ResponseWriter, r *http.Request, repo string) error {
	if err := ValidateRepository(repo); err != nil {
		return err
	}
	q, err := usageQuery(r.URL.RawQuery, "refresh")
	if err != nil {
		return err
	}
	refresh := false
	if v, ok := q["refresh"]; ok {
		if refresh, err = parseBool("refresh", v); err != nil {
			return err
		}
	}
	action := "pull"
	if refresh {
		action = "delete"
	}
	if err := h.access.Authorize(r, repo, action); err != nil {
		return err
	}
	b, ctx := h.backend, r.Context()
	if b.Usage == nil {
		return fmt.Errorf("%w: usage needs the reclaim storage middleware's Redis", errMethod)
	}
	exists := func() error {
		if b.Exists != nil {
			if ok, err := b.Exists(ctx, repo); err == nil && !ok {
				return fmt.Errorf("%w: %s", collector.ErrRepositoryNotFound, repo)
			}
		}
		return nil
	}
	if refresh {
		if err := exists(); err != nil {
			return err
		}
		u, rep, err := b.Collector.Usage(ctx, repo)
		observe(rep, err)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, h.withTrash(u))
		return nil
	}
	u, ok, err := b.Usage.Usage(ctx, repo)
	if err != nil {
		return err
	}
	if !ok {
		if err := exists(); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s", errUsageUnknown, repo)
	}
	writeJSON(w, http.StatusOK, h.withTrash(u))
	return nil
}

// trashedUsage is a usage estimate while the trash is on: a collect moves
// the reclaimable bytes to the trash, and they are freed only when its
// entries expire, TrashKeepSeconds later (or are purged).
type trashedUsage struct {
	reclaim.Usage
	TrashKeepSeconds int64 `json:"trash_keep_seconds,omitempty"`
}

func (h *API) withTrash(u reclaim.Usage) trashedUsage {
	out := trashedUsage{Usage: u}
	if h.backend.Trash != nil {
		out.TrashKeepSeconds = int64(h.backend.Trash.Keep() / time.Second)
	}
	return out
}

func (h *API) topUsage(w http.ResponseWriter, r *http.Request) error {
	if err := h.access.AuthorizeCatalog(r); err != nil {
		return err
	}
	q, err := usageQuery(r.URL.RawQuery, "top", "by")
	if err != nil {
		return err
	}
	n, by := defaultUsageTop, usage.ByReclaimable
	if v, ok := q["top"]; ok {
		if n, err = strconv.Atoi(v); !positiveRe.MatchString(v) || err != nil || n > maxUsageTop {
			return fmt.Errorf("%w: top=%q: want an integer from 1 to %d", errBadRequest, v, maxUsageTop)
		}
	}
	if v, ok := q["by"]; ok {
		if v != usage.ByReclaimable && v != usage.ByExclusive {
			return fmt.Errorf("%w: by=%q: want %s or %s", errBadRequest, v, usage.ByReclaimable, usage.ByExclusive)
		}
		by = v
	}
	b := h.backend
	if b.Usage == nil {
		return fmt.Errorf("%w: usage needs the reclaim storage middleware's Redis", errMethod)
	}
	list, ranked, err := b.Usage.Top(r.Context(), by, n)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"by": by, "top": n, "ranked": ranked, "repositories": list})
	return nil
}
