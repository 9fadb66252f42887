package redisstate

import (
	"context"
	"fmt"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/redis/go-redis/v9"
)

// A fence decides on the records of one master: the one that serves the
// object's hash slot when the fence script runs. Recording ticks notice a
// restart or failover of that master only every epochinterval, so a fence
// taken on a promoted replica before the next tick would trust records the
// failover lost. So right after its script, Fence asks the master that
// serves the key for its run_id and master_replid (one round trip) and
// compares them with the last tick's: if they differ, or this process has
// not ticked yet, it runs a tick now, which moves the epoch when records
// may be lost, and the fence then finds the epoch too young. If the master
// is still the one the last tick saw (same run, same replication history),
// it held every record the tick vouched for when the script ran.

// checkServer verifies the master that serves key, as described above. It
// returns nil when the fence may go on to its epoch check.
func (t *Tracker) checkServer(ctx context.Context, key string) error {
	if t.opts.Embedded {
		return nil
	}
	name, c := "master", redis.UniversalClient(t.c)
	if cc, ok := t.c.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return fmt.Errorf("%w: master of %s: %v", reclaim.ErrTrackerUnavailable, key, err)
		}
		name, c = m.Options().Addr, m
	}
	pipe := c.Pipeline()
	server, repl := pipe.Info(ctx, "server"), pipe.Info(ctx, "replication")
	_, _ = pipe.Exec(ctx)
	for _, s := range []*redis.StringCmd{server, repl} {
		if err := s.Err(); err != nil {
			if unsupported(err) {
				return nil // INFO refused: only ticks could tell (docs/operations.md)
			}
			return fmt.Errorf("%w: info %s: %v", reclaim.ErrTrackerUnavailable, name, err)
		}
	}
	m := parseInfo(server.Val() + "\n" + repl.Val())
	if m["run_id"] == "" {
		return nil // not a real Redis INFO
	}
	t.watch.mu.Lock()
	last, seen := t.watch.nodes[name]
	t.watch.mu.Unlock()
	if seen && last.runID == m["run_id"] && last.replID == m["master_replid"] && m["role"] == "master" {
		return nil
	}
	return t.checkRedis(ctx)
}
