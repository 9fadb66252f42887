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
// A question that finds no fence proves nothing by itself, though: a
// deleter may have fenced, read, deleted and released between the write
// and the question (found by TestE2ERetentionApplyVsTagMove in CI). So a
// tag fence leaves a mark from the moment it is taken until
// TagMarkTTL after its release (or its lease, if the deleter died),
// and a writer whose question finds the mark looks at the tag again, as
// one that waited out the fence does.
//
//	reclaim:{tag:<repo>}:f:<tag>   fence on a tag (value: token, PX lease)
//	reclaim:{tag:<repo>}:d:<tag>   a deleter held the tag's fence lately (PX lease + TagMarkTTL, renewed on release)

// TagMarkTTL is how long after a tag fence a writer of the tag still
// looks at the tag again: far longer than a push takes between its tag
// write and its question. A writer whose question comes later than that
// after its write cannot rely on the mark, and looks at the tag again
// whatever its question found (storage/middleware, tagWritten).
const TagMarkTTL = time.Minute

func (t *Tracker) tagFenceKey(repo, tag string) string {
	return t.opts.Prefix + "{tag:" + repo + "}:f:" + tag
}

func (t *Tracker) tagMarkKey(repo, tag string) string {
	return t.opts.Prefix + "{tag:" + repo + "}:d:" + tag
}

// KEYS: fence, mark; ARGV: token, lease ms, mark ms. The mark first, so
// that no moment has neither.
var fenceTagScript = redis.NewScript(`
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
`)

// KEYS: fence, mark; ARGV: token, mark ms.
var releaseTagScript = redis.NewScript(`
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

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
	key, mark := t.tagFenceKey(repo, tag), t.tagMarkKey(repo, tag)
	ok, err := fenceTagScript.Run(ctx, t.c, []string{key, mark}, tok, lease.Milliseconds(), (lease + TagMarkTTL).Milliseconds()).Int()
	if err != nil {
		return nil, fmt.Errorf("%w: fence tag %s of %s: %v", reclaim.ErrTrackerUnavailable, tag, repo, err)
	}
	if ok != 1 {
		return nil, fmt.Errorf("%w: tag %s of %s", reclaim.ErrFenced, tag, repo)
	}
	return &Fence{Token: tok, Taken: time.Now(), key: key, mark: mark, t: t, lease: lease}, nil
}

// TagState reports whether a deleter holds the fence on tag of repo, and
// whether one held it lately (the mark): a writer that wrote the tag before
// asking looks at it again in either case. One round trip.
func (t *Tracker) TagState(ctx context.Context, repo, tag string) (fenced, lately bool, err error) {
	v, err := t.c.MGet(ctx, t.tagFenceKey(repo, tag), t.tagMarkKey(repo, tag)).Result()
	if err != nil {
		return false, false, fmt.Errorf("%w: tag fence of %s in %s: %v", reclaim.ErrTrackerUnavailable, tag, repo, err)
	}
	return v[0] != nil, v[1] != nil, nil
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
