package gcapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/inuse"
)

// The in-use index:
//
//	GET    /gc/v1/inuse/sources           every source, its age and size
//	GET    /gc/v1/inuse/sources/<source>  one source and its images
//	PUT    /gc/v1/inuse/sources/<source>  replace what it declares: {"images":[{"repository","digest"}]}
//	DELETE /gc/v1/inuse/sources/<source>  forget it
//
// The index spans repositories. Reads ask for the registry-wide scope
// Distribution's catalog uses (registry:catalog:*): it says what runs
// where. Writes (PUT, DELETE) ask for registry:inuse:write, which the
// catalog scope does not grant: what the index declares is what retention
// never deletes (registry/accesscontrol).

// maxInUseBody bounds a source's upload: some 150,000 images.
const maxInUseBody = 32 << 20

// sourceView is a source as the API shows it, with its age.
type sourceView struct {
	inuse.Source
	AgeSeconds int64 `json:"age_seconds"`
}

func view(src inuse.Source, now time.Time) sourceView {
	return sourceView{Source: src, AgeSeconds: int64(now.Sub(src.UpdatedAt) / time.Second)}
}

// inuse serves the sources (name "") or one source.
func (h *API) inuse(w http.ResponseWriter, r *http.Request, name string) error {
	if err := h.authorizeInUse(r); err != nil {
		return err
	}
	s := h.backend.InUse
	if s == nil {
		return fmt.Errorf("%w: the in-use index needs the reclaim storage middleware's Redis", errMethod)
	}
	ctx, now := r.Context(), time.Now()
	if name == "" {
		if r.Method != http.MethodGet {
			return fmt.Errorf("%w: %s; list sources with GET, or name the source", errMethod, r.Method)
		}
		srcs, err := s.Sources(ctx)
		if err != nil {
			return err
		}
		out := make([]sourceView, len(srcs))
		for i, src := range srcs {
			out[i] = view(src, now)
		}
		writeJSON(w, http.StatusOK, map[string]any{"sources": out})
		return nil
	}
	if err := retention.ValidateSource(name); err != nil {
		return err
	}
	switch r.Method {
	case http.MethodGet:
		src, images, err := s.Images(ctx, name)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"source": view(src, now), "images": images})
		return nil
	case http.MethodPut:
		// held until the images are stored: they cost memory until then
		release, err := h.bodies.acquire(r, maxInUseBody)
		if err != nil {
			return err
		}
		defer release()
		var req struct {
			Images []inuse.Image `json:"images"`
		}
		if err := readJSON(r, maxInUseBody, &req); err != nil {
			return err
		}
		if req.Images == nil {
			return fmt.Errorf("%w: the body must list \"images\" (an empty list declares that the source runs nothing)", retention.ErrInvalid)
		}
		if err := retention.ValidateImages(req.Images, ValidateRepository); err != nil {
			return err
		}
		src, err := s.Put(ctx, name, inuse.SortImages(req.Images), now)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, view(src, now))
		return nil
	case http.MethodDelete:
		if err := s.Delete(ctx, name); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return fmt.Errorf("%w: %s; use GET, PUT or DELETE", errMethod, r.Method)
}

// authorizeInUse asks for the catalog scope to read the index and for
// registry:inuse:write to change it.
func (h *API) authorizeInUse(r *http.Request) error {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return h.access.AuthorizeCatalog(r)
	}
	return h.access.AuthorizeRegistry(r, inUseResource, inUseWriteAction)
}

// The in-use index decides which versions retention must never delete, so
// writing it is a scope of its own, in Distribution's resource-scope style
// (type "registry", as the catalog's): a token that may only browse the
// catalog cannot rewrite or forget a source. htpasswd grants it to every
// valid user, as it grants everything.
const (
	inUseResource    = "inuse"
	inUseWriteAction = "write"
)
