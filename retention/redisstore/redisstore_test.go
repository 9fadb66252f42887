package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/inuse"
	"github.com/reclaim-registry/reclaim/retention/pin"
)

func client(t *testing.T) (*miniredis.Miniredis, redis.UniversalClient) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	return m, c
}

func TestPins(t *testing.T) {
	m, c := client(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewPins(c, "t:", func() time.Time { return now })
	ctx := context.Background()
	d := digest.FromString("m")
	exp := now.Add(time.Hour)
	for _, pn := range []pin.Pin{
		{Repository: "team/app", Ref: d.String(), Note: "legal hold", CreatedAt: now},
		{Repository: "team/app", Ref: "v1", CreatedAt: now, ExpiresAt: &exp},
		{Repository: "other", Ref: d.String(), CreatedAt: now, ExpiresAt: &exp},
	} {
		if created, err := p.Put(ctx, pn); err != nil || !created {
			t.Fatalf("put %+v: %v %v", pn, created, err)
		}
	}
	if !m.Exists("t:{team/app}:pins") {
		t.Fatalf("keys %v: a repository's pins live under its hash tag", m.Keys())
	}
	if ok, err := p.Pinned(ctx, "team/app", d); !ok || err != nil {
		t.Fatalf("pinned: %v %v", ok, err)
	}
	if ok, _ := p.Pinned(ctx, "team/app", digest.FromString("x")); ok {
		t.Fatal("an unpinned digest is pinned")
	}
	list, err := p.List(ctx, "team/app")
	if err != nil || len(list) != 2 || list[0].Ref != d.String() || list[1].Ref != "v1" || list[0].Note != "legal hold" {
		t.Fatalf("list %+v %v", list, err)
	}

	now = exp // the expiring pins expire
	if ok, _ := p.Pinned(ctx, "other", d); ok {
		t.Fatal("an expired pin protects")
	}
	if _, err := p.Get(ctx, "team/app", "v1"); !errors.Is(err, pin.ErrNotFound) {
		t.Fatalf("get expired: %v", err)
	}
	if list, _ := p.List(ctx, "team/app"); len(list) != 1 || list[0].Ref != d.String() {
		t.Fatalf("list after expiry %+v", list)
	}
	if m.HGet("t:{team/app}:pins", "v1") != "" {
		t.Fatal("the listing did not prune the expired pin")
	}

	if err := p.Delete(ctx, "team/app", d.String()); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, "team/app", d.String()); !errors.Is(err, pin.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	m.HSet("t:{bad}:pins", d.String(), "{not json")
	if _, err := p.Pinned(ctx, "bad", d); !errors.Is(err, retention.ErrUnavailable) {
		t.Fatalf("an unreadable pin must fail closed: %v", err)
	}
	m.Close()
	if _, err := p.Pinned(ctx, "team/app", d); !errors.Is(err, retention.ErrUnavailable) {
		t.Fatalf("redis down: %v", err)
	}
}

func TestInUse(t *testing.T) {
	m, c := client(t)
	s := NewInUse(c, "t:")
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var many []inuse.Image
	for i := range 2500 {
		many = append(many, inuse.Image{Repository: "team/app", Digest: digest.FromString(string(rune('a'+i%26)) + time.Duration(i).String())})
	}
	many = inuse.SortImages(many)
	if src, err := s.Put(ctx, "prod", many, now); err != nil || src.Images != 2500 {
		t.Fatalf("put: %+v %v", src, err)
	}
	one := []inuse.Image{{Repository: "shared/base", Digest: digest.FromString("b")}}
	if _, err := s.Put(ctx, "preview", one, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "empty", nil, now); err != nil {
		t.Fatal(err)
	}
	srcs, err := s.Sources(ctx)
	if err != nil || len(srcs) != 3 || srcs[0].Name != "empty" || srcs[0].Images != 0 || srcs[1].Name != "preview" || !srcs[1].UpdatedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("sources %+v %v", srcs, err)
	}
	src, images, err := s.Images(ctx, "prod")
	if err != nil || src.Images != 2500 || len(images) != 2500 || images[0] != many[0] {
		t.Fatalf("images: %+v %d %v", src, len(images), err)
	}
	// Put replaces: the old set is gone.
	if _, err := s.Put(ctx, "prod", one, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, images, _ := s.Images(ctx, "prod"); len(images) != 1 || images[0] != one[0] {
		t.Fatalf("after replace: %v", images)
	}
	if err := s.Delete(ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Images(ctx, "prod"); !errors.Is(err, retention.ErrSourceNotFound) {
		t.Fatalf("deleted source: %v", err)
	}
	if err := s.Delete(ctx, "prod"); !errors.Is(err, retention.ErrSourceNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	// A name listed without its keys (a Put cut short) is left out.
	m.SAdd("t:inuse:sources", "ghost")
	if srcs, _ := s.Sources(ctx); len(srcs) != 2 {
		t.Fatalf("sources %+v", srcs)
	}
}
