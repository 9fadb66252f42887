package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// Plans are stored under their repository's hash tag, listed by
// repository and registry-wide by age, and expire after keep.
func TestPlans(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) { testPlans(t, b.Client(t), b.Prefix) })
}

func testPlans(t *testing.T, c redis.UniversalClient, prefix string) {
	s := NewPlans(c, prefix, 14*24*time.Hour)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var ids []string
	for i, repo := range []string{"team/a", "team/b", "team/a"} {
		p := &retention.Plan{ID: retention.NewPlanID(), Repository: repo, CreatedAt: now.Add(time.Duration(i-3) * time.Hour), Status: retention.PlanReady}
		if err := s.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	if ttl := c.TTL(ctx, prefix+"{team/a}:retention:plan:"+ids[0]).Val(); ttl <= 13*24*time.Hour {
		t.Fatalf("ttl %v", ttl)
	}
	p, err := s.Get(ctx, "team/a", ids[0])
	if err != nil || p.ID != ids[0] || !p.CreatedAt.Equal(now.Add(-3*time.Hour)) {
		t.Fatalf("%+v %v", p, err)
	}
	if _, err := s.Get(ctx, "team/b", ids[0]); !errors.Is(err, retention.ErrPlanNotFound) {
		t.Fatalf("another repository's id: %v", err)
	}
	list, err := s.List(ctx, "team/a", now.Add(-24*time.Hour), now, 10)
	if err != nil || len(list) != 2 || list[0].ID != ids[2] || list[1].Repository != "team/a" {
		t.Fatalf("%+v %v", list, err)
	}
	all, err := s.List(ctx, "", now.Add(-150*time.Minute), now, 10)
	if err != nil || len(all) != 2 || all[0].ID != ids[2] || all[1].Repository != "team/b" {
		t.Fatalf("by age: %+v %v", all, err)
	}
	if all, _ := s.List(ctx, "", now.Add(-24*time.Hour), now, 1); len(all) != 1 {
		t.Fatalf("limit: %+v", all)
	}
	c.Set(ctx, prefix+"{bad}:retention:plan:"+ids[0], "{", time.Minute)
	if _, err := s.Get(ctx, "bad", ids[0]); !errors.Is(err, retention.ErrUnavailable) {
		t.Fatalf("corrupt plan: %v", err)
	}
}

func TestInUseContains(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) { testInUseContains(t, b.Client(t), b.Prefix) })
}

func testInUseContains(t *testing.T, c redis.UniversalClient, prefix string) {
	s := NewInUse(c, prefix)
	ctx := t.Context()
	a := retention.Image{Repository: "team/app", Digest: digest.FromString("a")}
	if ok, err := s.Contains(ctx, a); ok || err != nil {
		t.Fatalf("empty index: %v %v", ok, err)
	}
	for _, src := range []string{"one", "two"} {
		if _, err := s.Put(ctx, src, []retention.Image{{Repository: "x", Digest: a.Digest}}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := s.Contains(ctx, a); ok {
		t.Fatal("another repository's digest is in use here")
	}
	if _, err := s.Put(ctx, "two", []retention.Image{a}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Contains(ctx, a); !ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
}
