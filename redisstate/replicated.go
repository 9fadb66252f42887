package redisstate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/redis/go-redis/v9"
)

// A blob delete is the one GC step whose effect a lost fence cannot undo:
// once the request is sent, the store may execute it whatever happens to
// the fence. If the master that holds the fence fails over before the
// fence reached a replica, the promoted replica has no fence (and no
// tombstone): a writer's touch succeeds, its Stat still finds the data, it
// links the blob and answers 201, and then the delete lands. So the
// confirmation right before a blob delete (and each renewal while it
// runs) is acknowledged by a replica before it counts:
//
//	master of the blob's slot, one connection:  renew(fence)  INFO replication  [WAIT 1 replicaAck]
//
// WAIT counts the replicas that hold every write this connection made, and
// the replication stream is ordered, so a replica that acknowledged the
// renewal holds the fence as it was taken and renewed. A master with no
// connected replica has nothing to wait for (and no replica to fail over
// to with lost writes); one with replicas that do not answer within
// replicaAck keeps the blob (the confirmation fails: the run reports the
// blob kept, check_failed, and a later run tries again).

// replicaAck bounds how long a blob delete waits for a replica to
// acknowledge its fence. Replication on a healthy link takes well under a
// millisecond; a replica that lags by a second is one a failover would
// lose writes on.
const replicaAck = time.Second

// confirmReplicated is Confirm for a blob's fence, as described above.
func (t *Tracker) confirmReplicated(ctx context.Context, f *Fence, lease time.Duration) error {
	master := redis.UniversalClient(t.c)
	if cc, ok := t.c.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, f.key)
		if err != nil {
			return fmt.Errorf("%w: master of %s: %v", reclaim.ErrTrackerUnavailable, f.key, err)
		}
		master = m
	}
	c, ok := master.(*redis.Client)
	if !ok { // a Ring: no master to ask
		n, err := renewScript.Run(ctx, t.c, []string{f.key}, f.Token, lease.Milliseconds()).Int64()
		return confirmed(f, n, err)
	}
	conn := c.Conn()
	defer conn.Close()
	pipe := conn.Pipeline()
	renew := pipe.Eval(ctx, renewEval, []string{f.key}, f.Token, lease.Milliseconds())
	repl := pipe.Info(ctx, "replication")
	_, _ = pipe.Exec(ctx)
	n, err := renew.Int64()
	if err := confirmed(f, n, err); err != nil {
		return err
	}
	replicas := 0
	if err := repl.Err(); err == nil {
		replicas, _ = strconv.Atoi(parseInfo(repl.Val())["connected_slaves"])
	} else if !unsupported(err) {
		return fmt.Errorf("%w: confirm fence on %s: replication: %v", reclaim.ErrTrackerUnavailable, f.Object, err)
	}
	if replicas == 0 {
		return nil // INFO refused, or no replica: nothing to wait for
	}
	start := time.Now()
	acked, err := conn.Wait(ctx, 1, replicaAck).Result()
	metricRedisLatency.WithLabelValues("fence_replicated").Observe(time.Since(start).Seconds())
	switch {
	case err != nil && !errors.Is(err, redis.Nil):
		return fmt.Errorf("%w: confirm fence on %s: wait for a replica: %v", reclaim.ErrTrackerUnavailable, f.Object, err)
	case acked < 1:
		metricFences.WithLabelValues("unreplicated").Inc()
		return fmt.Errorf("%w: fence on %s not acknowledged by any of %d replicas within %v: a failover could lose it", reclaim.ErrTrackerUnavailable, f.Object, replicas, replicaAck)
	}
	return nil
}
