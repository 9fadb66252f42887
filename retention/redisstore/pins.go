package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/pin"
)

// Pins stores pins, one hash per repository.
type Pins struct {
	c      redis.UniversalClient
	prefix string
	now    func() time.Time
}

// NewPins stores under prefix on c; now is the clock expiries are
// compared with (time.Now when nil).
func NewPins(c redis.UniversalClient, prefix string, now func() time.Time) *Pins {
	if now == nil {
		now = time.Now
	}
	return &Pins{c: c, prefix: prefix, now: now}
}

func (p *Pins) key(repo string) string { return p.prefix + "{" + repo + "}:pins" }

func unavailable(op string, err error) error {
	return fmt.Errorf("%w: %s: %v", retention.ErrUnavailable, op, err)
}

// Put stores pn, replacing any pin of the same ref. created reports
// whether there was none.
func (p *Pins) Put(ctx context.Context, pn pin.Pin) (created bool, err error) {
	b, err := json.Marshal(pn)
	if err != nil {
		return false, err
	}
	n, err := p.c.HSet(ctx, p.key(pn.Repository), pn.Ref, b).Result()
	if err != nil {
		return false, unavailable("store pin", err)
	}
	return n == 1, nil
}

// Delete removes the pin of ref; pin.ErrNotFound when there is none.
func (p *Pins) Delete(ctx context.Context, repo, ref string) error {
	n, err := p.c.HDel(ctx, p.key(repo), ref).Result()
	if err != nil {
		return unavailable("delete pin", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s of %s", pin.ErrNotFound, ref, repo)
	}
	return nil
}

// Get returns the active pin of ref; pin.ErrNotFound when there is none or
// it expired.
func (p *Pins) Get(ctx context.Context, repo, ref string) (pin.Pin, error) {
	b, err := p.c.HGet(ctx, p.key(repo), ref).Bytes()
	if errors.Is(err, redis.Nil) {
		return pin.Pin{}, fmt.Errorf("%w: %s of %s", pin.ErrNotFound, ref, repo)
	}
	if err != nil {
		return pin.Pin{}, unavailable("read pin", err)
	}
	var pn pin.Pin
	if err := json.Unmarshal(b, &pn); err != nil {
		// fail closed: an unreadable pin is no answer
		return pin.Pin{}, unavailable("decode pin "+ref+" of "+repo, err)
	}
	if !pn.Active(p.now()) {
		return pin.Pin{}, fmt.Errorf("%w: %s of %s (expired)", pin.ErrNotFound, ref, repo)
	}
	return pn, nil
}

// Pinned is gc's Pinner: whether an active pin names manifest d of repo.
func (p *Pins) Pinned(ctx context.Context, repo string, d digest.Digest) (bool, error) {
	_, err := p.Get(ctx, repo, d.String())
	switch {
	case errors.Is(err, pin.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// deleteIfSame removes a hash field only if it still holds ARGV[2]: an
// expired pin is pruned, never one stored again meanwhile.
var deleteIfSame = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
`)

// List returns the active pins of repo, sorted by ref, and prunes the
// expired ones.
func (p *Pins) List(ctx context.Context, repo string) ([]pin.Pin, error) {
	all, err := p.c.HGetAll(ctx, p.key(repo)).Result()
	if err != nil {
		return nil, unavailable("list pins", err)
	}
	now := p.now()
	out := []pin.Pin{}
	for ref, v := range all {
		var pn pin.Pin
		if err := json.Unmarshal([]byte(v), &pn); err != nil {
			return nil, unavailable("decode pin "+ref+" of "+repo, err)
		}
		if pn.Active(now) {
			out = append(out, pn)
			continue
		}
		// best effort: an expired pin protects nothing whether or not
		// it is pruned now
		_ = deleteIfSame.Run(ctx, p.c, []string{p.key(repo)}, ref, v).Err()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out, nil
}
