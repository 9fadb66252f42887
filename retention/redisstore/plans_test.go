package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/inuse"
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
	a := inuse.Image{Repository: "team/app", Digest: digest.FromString("a")}
	if ok, err := s.Contains(ctx, a); ok || err != nil {
		t.Fatalf("empty index: %v %v", ok, err)
	}
	for _, src := range []string{"one", "two"} {
		if _, err := s.Put(ctx, src, []inuse.Image{{Repository: "x", Digest: a.Digest}}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := s.Contains(ctx, a); ok {
		t.Fatal("another repository's digest is in use here")
	}
	if _, err := s.Put(ctx, "two", []inuse.Image{a}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Contains(ctx, a); !ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
}

// A plan's applies are kept with it, oldest first; aborted previews are
// listed newest first.
func TestPlanOutcomes(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		c := b.Client(t)
		s := NewPlans(c, b.Prefix, 14*24*time.Hour)
		ctx := t.Context()
		now := time.Now().UTC().Truncate(time.Millisecond)
		id := retention.NewPlanID()
		if got, err := s.Applies(ctx, "team/a", id); err != nil || len(got) != 0 {
			t.Fatalf("never applied: %+v %v", got, err)
		}
		first := &retention.ApplyReport{PlanID: id, Repository: "team/a", StartedAt: now, FinishedAt: now,
			Deleted: []retention.TagResult{{Tag: "v1"}}, Skipped: []retention.TagResult{{Tag: "v2", Reason: "in_use"}}}
		second := &retention.ApplyReport{PlanID: id, Repository: "team/a", StartedAt: now.Add(time.Minute),
			Aborted: &retention.AbortError{Reason: "inuse_stale", Detail: "old"}}
		for _, r := range []*retention.ApplyReport{first, second} {
			if err := s.PutApply(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Applies(ctx, "team/a", id)
		if err != nil || len(got) != 2 || len(got[0].Deleted) != 1 || got[0].Skipped[0].Reason != "in_use" ||
			got[1].Aborted == nil || got[1].Aborted.Reason != "inuse_stale" {
			t.Fatalf("applies: %+v %v", got, err)
		}
		if ttl := c.TTL(ctx, b.Prefix+"{team/a}:retention:applies:"+id).Val(); ttl <= 13*24*time.Hour {
			t.Fatalf("applies ttl %v", ttl)
		}
		for i, repo := range []string{"team/a", "team/b"} {
			if err := s.PutAborted(ctx, AbortedPreview{Repository: repo, At: now.Add(time.Duration(i) * time.Second),
				Reason: "inuse_empty", Detail: "no source declares anything"}); err != nil {
				t.Fatal(err)
			}
		}
		ab, err := s.Aborted(ctx, now.Add(-time.Hour), 10)
		if err != nil || len(ab) != 2 || ab[0].Repository != "team/b" || ab[1].Reason != "inuse_empty" || !ab[1].At.Equal(now) {
			t.Fatalf("aborted: %+v %v", ab, err)
		}
		if ab, _ := s.Aborted(ctx, now.Add(-time.Hour), 1); len(ab) != 1 {
			t.Fatalf("limit: %+v", ab)
		}
	})
}
