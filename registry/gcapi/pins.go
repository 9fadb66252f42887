package gcapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/pin"
)

// Pins, under the repository endpoints:
//
//	GET    /gc/v1/repositories/<name>/pins          the repository's active pins
//	GET    /gc/v1/repositories/<name>/pins/<ref>    one pin
//	PUT    /gc/v1/repositories/<name>/pins/<ref>    pin a tag or a digest {note, expires_at | expires_in}
//	DELETE /gc/v1/repositories/<name>/pins/<ref>    unpin
//
// PUT and DELETE need "delete" on the repository, as a collection does;
// GET needs "pull". The collection routes are POST, so a method tells the
// two apart. The name is everything before the last "/pins" or
// "/pins/<ref>" (a ref holds no '/'): "x/pins/pins" is the pin "pins" of
// x, and the pins of a repository named "x/pins" are listed at
// "x/pins/pins/"; a ref with a ':' and a '/' is a malformed digest. A GET
// of "<name>/pins/usage" is the usage of the repository "<name>/pins"
// (usage.go), routed first (routes.go).

// errManifestUnknown: the pinned tag or manifest is not in the repository.
var errManifestUnknown = codeManifestUnknown.err("manifest unknown")

// errPinRace: the pin was stored while a collector held the manifest's
// fence; whether the manifest survived is known only once the fence is
// released.
var errPinRace = codeDeleting.err("a collection or a retention apply is deleting this manifest or tag right now; the pin is stored " +
	"and kept it if the deleter had not re-checked pins yet: repeat the request to find out (404 if it was deleted)")

func (h *API) pins(w http.ResponseWriter, r *http.Request, repo, ref string) error {
	if err := ValidateRepository(repo); err != nil {
		return err
	}
	action := "delete"
	if r.Method == http.MethodGet {
		action = "pull"
	}
	if err := h.access.Authorize(r, repo, action); err != nil {
		return err
	}
	b := h.backend
	if b.Pins == nil {
		return fmt.Errorf("%w: pins need the reclaim storage middleware's Redis", errMethod)
	}
	if ref == "" {
		if r.Method != http.MethodGet {
			return fmt.Errorf("%w: %s; list pins with GET, or name the tag or digest to pin", errMethod, r.Method)
		}
		list, err := b.Pins.List(r.Context(), repo)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"repository": repo, "pins": list})
		return nil
	}
	pref, err := pin.ParseRef(ref)
	if err != nil {
		return err
	}
	switch r.Method {
	case http.MethodGet:
		pin, err := b.Pins.Get(r.Context(), repo, pref.String())
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, pin)
		return nil
	case http.MethodPut:
		return h.putPin(w, r, repo, pref)
	case http.MethodDelete:
		if err := b.Pins.Delete(r.Context(), repo, pref.String()); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return fmt.Errorf("%w: %s; use GET, PUT or DELETE", errMethod, r.Method)
}

// putPin stores the pin, then asks whether a collector fences the pinned
// manifest. A collector re-reads pins under its fence right before it
// deletes (gc's deleter), so: no fence now means any later fence comes
// after the pin and its re-read sees it; a fence now means the collector
// may have re-read already, and the caller is told so (409) instead of
// being promised a protection that may come too late.
func (h *API) putPin(w http.ResponseWriter, r *http.Request, repo string, ref pin.Ref) error {
	var req pin.Request
	if err := readJSON(r, maxBody, &req); err != nil {
		return err
	}
	pin, err := pin.New(repo, ref, req, time.Now())
	if err != nil {
		return err
	}
	b, ctx := h.backend, r.Context()
	if b.Exists == nil || b.HasVersion == nil || b.Fenced == nil || b.TagState == nil {
		return fmt.Errorf("%w: pins need the reclaim storage middleware", errMethod)
	}
	if ok, err := b.Exists(ctx, repo); err != nil {
		return fmt.Errorf("%w: %v", retention.ErrUnavailable, err)
	} else if !ok {
		return fmt.Errorf("%w: %s", collector.ErrRepositoryNotFound, repo)
	}
	if ok, err := b.HasVersion(ctx, repo, ref); err != nil {
		return fmt.Errorf("%w: %v", retention.ErrUnavailable, err)
	} else if !ok {
		return fmt.Errorf("%w: %s in %s", errManifestUnknown, ref, repo)
	}
	created, err := b.Pins.Put(ctx, pin)
	if err != nil {
		return err
	}
	// retention's compare-and-delete fences the tag before it reads the
	// pins (redisstate/tagfence.go), a collector the manifest: write
	// first, ask second
	if raced, err := b.pinRaced(ctx, repo, ref); err != nil {
		return err
	} else if raced {
		return errPinRace
	}
	// A 200 promises protection: a pin whose expiry passed while it was
	// stored and checked (expires_in: 1ms, a slow Redis) protects nothing.
	if err := pin.Live(time.Now()); err != nil {
		return fmt.Errorf("%w; the pin was stored but protects nothing", err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, pin)
	return nil
}

// pinRaced asks, once the pin of ref is stored, whether a deleter may have
// missed it: one that holds ref's fence now (a retention apply the tag's,
// a collector the manifest's) may have read the pins already. For a tag,
// an apply may also have fenced it, read the pins, deleted the tag and
// released the fence, all after this request found the tag: so the tag is
// read again, after the question (a deleter that fences later reads the
// pins later, and sees this one), and gone means raced. Not only when the
// fence's mark says a deleter was there lately: the mark lasts a minute,
// and a request may stall for longer.
func (b *Config) pinRaced(ctx context.Context, repo string, ref pin.Ref) (bool, error) {
	unreadable := func(what string, err error) error {
		return fmt.Errorf("%w: the pin is stored, but whether %s could not be read: %v", retention.ErrUnavailable, what, err)
	}
	if ref.Tag != "" {
		fenced, _, err := b.TagState(ctx, repo, ref.Tag)
		if err != nil {
			return false, unreadable("retention is deleting the tag", err)
		}
		if fenced {
			return true, nil
		}
		ok, err := b.HasVersion(ctx, repo, ref)
		if err != nil {
			return false, unreadable("the tag is still there", err)
		}
		return !ok, nil
	}
	if ref.Digest != "" {
		fenced, err := b.Fenced(ctx, repo, ref.Digest)
		if err != nil {
			return false, unreadable("a collection is deleting the manifest", err)
		}
		return fenced, nil
	}
	return false, nil
}
