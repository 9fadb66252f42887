package redisstate

import (
	"context"
	"fmt"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/redis/go-redis/v9"
)

// Tag fences make a tag delete by retention (or any collector) a
// compare-and-delete against concurrent pushes that move the tag:
//
//	deleter: fence(tag)   read tag: still the planned manifest?   delete   release
//	writer:  write tag    fenced(tag)? wait it out, read tag: still mine? else 503
//
// The writer writes first and asks second, the deleter fences first and
// reads second (the pins' pairing, fence.go). If the writer's question
// finds no fence, the fence comes later and so does the deleter's read,
// which sees the new target and keeps the tag. If it finds the fence, the
// delete may have removed the write: the writer waits for the release and
// looks, and answers 503 (the client retries the PUT) unless its write is
// still there. Either way a 201 is never given for a tag that is gone.
//
//	reclaim:{tag:<repo>}:f:<tag>   fence on a tag (value: token, PX lease)

func (t *Tracker) tagFenceKey(repo, tag string) string {
	return t.opts.Prefix + "{tag:" + repo + "}:f:" + tag
}

// FenceTag takes the fence on tag of repo for lease; ErrFenced when another
// deleter holds it. Release gives it back.
func (t *Tracker) FenceTag(ctx context.Context, repo, tag string, lease time.Duration) (*Fence, error) {
	if lease <= 0 {
		return nil, fmt.Errorf("redisstate: FenceTag: lease %v must be positive", lease)
	}
	tok, err := token()
	if err != nil {
		return nil, err
	}
	key := t.tagFenceKey(repo, tag)
	ok, err := t.c.SetNX(ctx, key, tok, lease).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: fence tag %s of %s: %v", reclaim.ErrTrackerUnavailable, tag, repo, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: tag %s of %s", reclaim.ErrFenced, tag, repo)
	}
	return &Fence{Token: tok, Taken: time.Now(), key: key, t: t, lease: lease}, nil
}

// TagFenced reports whether a deleter holds the fence on tag of repo.
func (t *Tracker) TagFenced(ctx context.Context, repo, tag string) (bool, error) {
	n, err := t.c.Exists(ctx, t.tagFenceKey(repo, tag)).Result()
	if err != nil && err != redis.Nil {
		return false, fmt.Errorf("%w: tag fence of %s in %s: %v", reclaim.ErrTrackerUnavailable, tag, repo, err)
	}
	return n > 0, nil
}

// Mark takes the fence on o for lease without the access check Fence
// makes: for a deleter that does not delete o but must be seen by the
// writers that ask whether o is fenced (a pin PUT, Fenced). Retention holds
// it on the planned manifest's revision link while it deletes one of its
// tags, so a pin of that manifest written meanwhile is either read by the
// apply or answered 409. A touch of o waits while it is held, as for any
// fence; ErrFenced when a collector holds o's fence already.
func (t *Tracker) Mark(ctx context.Context, o reclaim.Object, lease time.Duration) (*Fence, error) {
	tok, err := token()
	if err != nil {
		return nil, err
	}
	key := t.fenceKey(o)
	ok, err := t.c.SetNX(ctx, key, tok, lease).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: mark %s: %v", reclaim.ErrTrackerUnavailable, o, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s", reclaim.ErrFenced, o)
	}
	return &Fence{Object: o, Token: tok, Taken: time.Now(), key: key, t: t, lease: lease}, nil
}
