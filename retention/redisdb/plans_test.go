package redisdb

import (
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/retention"
)

// Plans are stored under their repository's hash tag, listed by
// repository and registry-wide by age, and expire after keep.
func TestPlans(t *testing.T) {
	m, c := client(t)
	s := NewPlans(c, "t:", 14*24*time.Hour)
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
	if ttl := m.TTL("t:{team/a}:retention:plan:" + ids[0]); ttl != 14*24*time.Hour {
		t.Fatalf("ttl %v; keys %v", ttl, m.Keys())
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
	m.Set("t:{bad}:retention:plan:"+ids[0], "{")
	if _, err := s.Get(ctx, "bad", ids[0]); !errors.Is(err, retention.ErrUnavailable) {
		t.Fatalf("corrupt plan: %v", err)
	}
}

func TestInUseContains(t *testing.T) {
	_, c := client(t)
	s := NewInUse(c, "t:")
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
