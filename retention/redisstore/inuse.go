package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/inuse"
)

// saddChunk bounds the members of one SADD.
const saddChunk = 1000

// InUse stores the in-use index: per source, the exact images it declared.
type InUse struct {
	c      redis.UniversalClient
	prefix string
}

// NewInUse stores under prefix on c.
func NewInUse(c redis.UniversalClient, prefix string) *InUse { return &InUse{c: c, prefix: prefix} }

func (s *InUse) imagesKey(name string) string { return s.prefix + "{inuse:" + name + "}:images" }
func (s *InUse) metaKey(name string) string   { return s.prefix + "{inuse:" + name + "}:meta" }
func (s *InUse) sourcesKey() string           { return s.prefix + "inuse:sources" }

// Put replaces what source name declares with images (validated, sorted,
// de-duplicated by the caller), stamped at now. The source's name is
// listed before its keys are written, and its keys are replaced in one
// transaction: a reader sees the old set or the new one, never a mix.
func (s *InUse) Put(ctx context.Context, name string, images []inuse.Image, now time.Time) (inuse.Source, error) {
	src := inuse.Source{Name: name, UpdatedAt: now.UTC(), Images: len(images)}
	meta, err := json.Marshal(src)
	if err != nil {
		return src, err
	}
	if err := s.c.SAdd(ctx, s.sourcesKey(), name).Err(); err != nil {
		return src, unavailable("list source", err)
	}
	_, err = s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.imagesKey(name))
		for start := 0; start < len(images); start += saddChunk {
			chunk := images[start:min(start+saddChunk, len(images))]
			members := make([]any, len(chunk))
			for i, im := range chunk {
				members[i] = im.String()
			}
			p.SAdd(ctx, s.imagesKey(name), members...)
		}
		p.Set(ctx, s.metaKey(name), meta, 0)
		return nil
	})
	if err != nil {
		return src, unavailable("store source "+name, err)
	}
	return src, nil
}

// Delete removes source name; ErrSourceNotFound when there is none.
func (s *InUse) Delete(ctx context.Context, name string) error {
	n, err := s.c.Del(ctx, s.metaKey(name), s.imagesKey(name)).Result()
	if err != nil {
		return unavailable("delete source "+name, err)
	}
	if err := s.c.SRem(ctx, s.sourcesKey(), name).Err(); err != nil {
		return unavailable("unlist source "+name, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", retention.ErrSourceNotFound, name)
	}
	return nil
}

// Sources lists every source, by name. A name listed without its keys (a
// Put or Delete cut short) is left out.
func (s *InUse) Sources(ctx context.Context) ([]inuse.Source, error) {
	names, err := s.c.SMembers(ctx, s.sourcesKey()).Result()
	if err != nil {
		return nil, unavailable("list sources", err)
	}
	sort.Strings(names)
	out := []inuse.Source{}
	for _, n := range names {
		src, err := s.meta(ctx, n)
		if errors.Is(err, retention.ErrSourceNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, src)
	}
	return out, nil
}

func (s *InUse) meta(ctx context.Context, name string) (inuse.Source, error) {
	b, err := s.c.Get(ctx, s.metaKey(name)).Bytes()
	if errors.Is(err, redis.Nil) {
		return inuse.Source{}, fmt.Errorf("%w: %s", retention.ErrSourceNotFound, name)
	}
	if err != nil {
		return inuse.Source{}, unavailable("read source "+name, err)
	}
	var src inuse.Source
	if err := json.Unmarshal(b, &src); err != nil {
		return inuse.Source{}, unavailable("decode source "+name, err)
	}
	return src, nil
}

// Images returns source name and what it declared, sorted.
func (s *InUse) Images(ctx context.Context, name string) (inuse.Source, []inuse.Image, error) {
	var meta *redis.StringCmd
	var members *redis.StringSliceCmd
	_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.Get(ctx, s.metaKey(name))
		members = p.SMembers(ctx, s.imagesKey(name))
		return nil
	})
	if errors.Is(err, redis.Nil) || errors.Is(meta.Err(), redis.Nil) {
		return inuse.Source{}, nil, fmt.Errorf("%w: %s", retention.ErrSourceNotFound, name)
	}
	if err != nil {
		return inuse.Source{}, nil, unavailable("read source "+name, err)
	}
	var src inuse.Source
	if err := json.Unmarshal([]byte(meta.Val()), &src); err != nil {
		return inuse.Source{}, nil, unavailable("decode source "+name, err)
	}
	images := make([]inuse.Image, 0, len(members.Val()))
	for _, m := range members.Val() {
		repo, d, ok := strings.Cut(m, "@")
		if !ok {
			return inuse.Source{}, nil, unavailable("decode source "+name, fmt.Errorf("member %q", m))
		}
		images = append(images, inuse.Image{Repository: repo, Digest: digest.Digest(d)})
	}
	return src, inuse.SortImages(images), nil
}

// Contains reports whether any source declares im now: the list of
// sources, then one SISMEMBER per source in one pipeline (on a cluster,
// go-redis sends each to its slot's master).
func (s *InUse) Contains(ctx context.Context, im inuse.Image) (bool, error) {
	names, err := s.c.SMembers(ctx, s.sourcesKey()).Result()
	if err != nil {
		return false, unavailable("list sources", err)
	}
	if len(names) == 0 {
		return false, nil
	}
	cmds := make([]*redis.BoolCmd, len(names))
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = p.SIsMember(ctx, s.imagesKey(n), im.String())
		}
		return nil
	})
	if err != nil {
		return false, unavailable("check in-use "+im.String(), err)
	}
	for _, c := range cmds {
		if c.Val() {
			return true, nil
		}
	}
	return false, nil
}
