package redisstate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/reclaim-registry/reclaim/internal/enum"
	"github.com/reclaim-registry/reclaim/internal/metrics"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// Silent loss. Redis can drop access records, fences and tombstones
// without a single call failing: a restart that go-redis' retries hide, a
// failover to a replica that had not received the last writes, a restart
// from an RDB snapshot minutes old, or eviction (`maxmemory-policy` other
// than noeviction; the volatile-* policies evict every key with a TTL,
// which is every key but the epoch). The epoch may survive all of these,
// and GC would then trust records that are gone: a wrong delete.
//
// So every recording tick (StartRecording, every EpochInterval) reads INFO
// from every master (Redis Cluster: ForEachMaster; otherwise the server the
// client is connected to, which for a Sentinel client is the current
// master) and compares it with the previous tick:
//
//	run_id changed              restart (or another server answers)   -> move the epoch
//	master_replid changed       failover                              -> move the epoch
//	evicted_keys grew           eviction                              -> move the epoch
//	evicted_keys went down      CONFIG RESETSTAT: evictions unknown   -> move the epoch
//	a master not seen before    Cluster failover or new node          -> move the epoch
//	maxmemory-policy evicts     GC refuses (ErrRedisEvicts) while it does
//
// Moving the epoch forward means GC trusts nothing for a full window. The
// last state seen is also kept in Redis, next to the epoch (same hash slot,
// no TTL), so a process that starts after a Redis restart still notices it:
// a restart from a snapshot brings back the old run_id with the old epoch.
//
// The embedded miniredis implements no usable INFO; it never evicts and
// restarts only with the process, whose fresh epoch already covers that.

// LossReason is why the recording epoch was moved forward.
type LossReason string

// The reasons, also the values of the reason label of
// reclaim_redis_epoch_moves_total.
const (
	// LossRestart: the server's run_id changed (a restart, or another
	// server answers at the address).
	LossRestart LossReason = "restart"
	// LossFailover: master_replid changed, or the new server was a replica
	// of the old one: writes not yet replicated are gone.
	LossFailover LossReason = "failover"
	// LossEvicted: evicted_keys grew.
	LossEvicted LossReason = "evicted"
	// LossStatsReset: evicted_keys went down with the same run_id (CONFIG
	// RESETSTAT), so evictions since the last tick cannot be ruled out.
	LossStatsReset LossReason = "stats_reset"
	// LossNewMaster: a Redis Cluster master that was not a master at the
	// last tick (a failover, or a node added).
	LossNewMaster LossReason = "new_master"
	// LossGap: Redis calls failed and then succeeded again (see
	// Tracker.succeeded); counted here too so one metric covers every move.
	LossGap LossReason = "gap"
)

var lossReasons = enum.Strings("redisstate.LossReason", LossRestart, LossFailover, LossEvicted, LossStatsReset, LossNewMaster, LossGap)

func (r LossReason) String() string { return lossReasons.String(r) }

// MarshalText encodes the name; a reason outside the set is an error.
func (r LossReason) MarshalText() ([]byte, error) { return lossReasons.MarshalText(r) }

// UnmarshalText decodes a name, strictly.
func (r *LossReason) UnmarshalText(b []byte) error { return lossReasons.UnmarshalText(b, r) }

var (
	metricEpochMoves = metrics.CounterVec("redis", "epoch_moves_total", "Times the recording epoch was moved forward because Redis may have lost records, by reason "+
		"(restart, failover, evicted, stats_reset, new_master, gap).", "reason")
	metricRedisEvicts = metrics.Gauge("redis", "evicts", "1 while a Redis master's maxmemory-policy may evict keys (GC refuses); 0 for noeviction or unknown.")
)

func init() {
	for _, r := range lossReasons.Values() {
		metricEpochMoves.WithLabelValues(r.String())
	}
}

// RedisHealth is what the last tick learned about Redis, for
// GET /gc/v1/status.
type RedisHealth struct {
	// Embedded: the in-process miniredis (noeviction, lives and dies with
	// the process).
	Embedded bool `json:"embedded"`
	// MaxmemoryPolicy is "noeviction", the evicting policy (the first
	// master's that evicts), or "unknown" (not readable, or not checked yet).
	MaxmemoryPolicy string `json:"maxmemory_policy"`
	// Evicts: the policy may evict keys; GC refuses (redis_evicts).
	Evicts bool `json:"evicts"`
	// Persistence is "aof", "rdb", "aof+rdb", "none" or "unknown" (for
	// several masters: "none" if any has none, else "unknown" if any is,
	// else "mixed" when they differ).
	Persistence string `json:"persistence"`
	// Epoch is the recording epoch as of the last tick: GC trusts the
	// absence of an access record only a window after it.
	Epoch time.Time `json:"epoch,omitzero"`
	// Checked is when INFO was last read successfully (local clock).
	Checked time.Time `json:"checked,omitzero"`
	// Error is why the last tick could not read INFO, if it could not.
	Error string `json:"error,omitempty"`
	// Nodes are the masters, as of Checked.
	Nodes []RedisNode `json:"nodes,omitempty"`
	// LastLoss is the last time the epoch was moved forward, and why.
	LastLoss *RedisLoss `json:"last_loss,omitempty"`
}

// RedisNode is one master as INFO describes it.
type RedisNode struct {
	Addr            string `json:"addr"`
	RunID           string `json:"run_id"`
	MasterReplID    string `json:"master_replid,omitempty"`
	EvictedKeys     int64  `json:"evicted_keys"`
	MaxmemoryPolicy string `json:"maxmemory_policy"`
	Maxmemory       int64  `json:"maxmemory"`
	Persistence     string `json:"persistence"`
}

// RedisLoss is one move of the epoch.
type RedisLoss struct {
	At     time.Time  `json:"at"`
	Reason LossReason `json:"reason"`
	Node   string     `json:"node,omitempty"`
	Detail string     `json:"detail,omitempty"`
	// Epoch is the epoch it moved to: GC trusts records again a window
	// after it.
	Epoch time.Time `json:"epoch"`
}

// redisWatch is the tracker's memory of the last tick.
type redisWatch struct {
	pollMu sync.Mutex // one tick at a time
	// read replaces readNodes in tests.
	read func(ctx context.Context) (map[string]redisNode, error)

	mu          sync.Mutex
	nodes       map[string]redisNode // last tick; nil before the first
	health      RedisHealth
	warnedInfo  bool
	warnedNoPol bool
	warnedNoPer bool
}

// evicting reports an evicting policy seen at the last tick.
func (w *redisWatch) evicting() (policy string, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.health.MaxmemoryPolicy, w.health.Evicts
}

func (w *redisWatch) noteLoss(l RedisLoss) {
	w.mu.Lock()
	w.health.LastLoss = &l
	if l.Epoch.After(w.health.Epoch) {
		w.health.Epoch = l.Epoch
	}
	w.mu.Unlock()
}

func (w *redisWatch) noteEpoch(e time.Time) {
	w.mu.Lock()
	w.health.Epoch = e.UTC()
	w.mu.Unlock()
}

// RedisHealth reports what the last recording tick learned about Redis.
func (t *Tracker) RedisHealth() RedisHealth {
	w := &t.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.health
	h.Nodes = slices.Clone(h.Nodes)
	if h.LastLoss != nil {
		l := *h.LastLoss
		h.LastLoss = &l
	}
	if t.opts.Embedded {
		h.Embedded, h.MaxmemoryPolicy, h.Persistence = true, "noeviction", "none"
	}
	if h.MaxmemoryPolicy == "" {
		h.MaxmemoryPolicy = "unknown"
	}
	if h.Persistence == "" {
		h.Persistence = "unknown"
	}
	return h
}

// checkRedis is the INFO half of a recording tick: it moves the epoch when
// Redis may have lost records since the last tick, and notes the policy.
func (t *Tracker) checkRedis(ctx context.Context) error {
	if t.opts.Embedded {
		return nil
	}
	w := &t.watch
	w.pollMu.Lock()
	defer w.pollMu.Unlock()
	nodes, ok, err := t.readINFO(ctx)
	if !ok {
		return err
	}
	w.mu.Lock()
	prev := w.nodes
	w.mu.Unlock()
	stored, err := t.storedBaseline(ctx, prev, nodes)
	if err != nil {
		return err
	}
	if reason, node, detail := firstLoss(prev, stored, nodes); reason != "" {
		epoch, err := epochScript.Run(ctx, t.c, []string{t.sinceKey()}, "1").Int64()
		if err != nil {
			// The baseline stays as it was: the next tick sees the same
			// change and tries again.
			t.failed(ctx, "epoch", err)
			return fmt.Errorf("%w: move epoch after redis %s: %v", reclaim.ErrTrackerUnavailable, reason, err)
		}
		t.moved(ctx, reason, node, detail, time.UnixMilli(epoch))
	}
	t.storeBaseline(ctx, prev, stored, nodes)
	t.noteNodes(ctx, nodes)
	return nil
}

// readINFO reads every master's INFO; ok is false when the tick ends here:
// INFO is unavailable for good (noted in the health, warned once, no
// error) or failed this time (err).
func (t *Tracker) readINFO(ctx context.Context) (nodes map[string]redisNode, ok bool, err error) {
	w := &t.watch
	read := t.readNodes
	if w.read != nil {
		read = w.read
	}
	nodes, err = read(ctx)
	if err == nil {
		return nodes, true, nil
	}
	if unsupported(err) {
		w.mu.Lock()
		w.health.Error = "INFO unavailable: " + err.Error()
		warn := !w.warnedInfo
		w.warnedInfo = true
		w.mu.Unlock()
		if warn {
			rlog.From(ctx).WithError(err).Warn("reclaim: cannot read redis INFO; restarts, failovers and evictions that lose access records go unnoticed. " +
				"Allow INFO to the middleware's redis user, and run redis with maxmemory-policy noeviction")
		}
		return nil, false, nil
	}
	t.failed(ctx, "info", err)
	w.mu.Lock()
	w.health.Error = err.Error()
	w.mu.Unlock()
	return nil, false, fmt.Errorf("%w: info: %v", reclaim.ErrTrackerUnavailable, err)
}

// storedBaseline reads what the last process stored next to the epoch, when
// this tick needs it: on a process's first tick, or for a master it has not
// seen.
func (t *Tracker) storedBaseline(ctx context.Context, prev, nodes map[string]redisNode) (map[string]string, error) {
	need := prev == nil
	for k := range nodes {
		if _, ok := prev[k]; !ok {
			need = true
		}
	}
	if !need {
		return nil, nil
	}
	stored, err := t.c.HGetAll(ctx, t.baselineKey()).Result()
	if err != nil {
		t.failed(ctx, "info", err)
		return nil, fmt.Errorf("%w: read redis baseline: %v", reclaim.ErrTrackerUnavailable, err)
	}
	return stored, nil
}

// firstLoss compares every master (in address order) with its last tick,
// or with the stored baseline when this process has none, and returns the
// first change that may have lost records; an empty reason when none did.
func firstLoss(prev map[string]redisNode, stored map[string]string, nodes map[string]redisNode) (reason LossReason, node, detail string) {
	for _, k := range slices.Sorted(maps.Keys(nodes)) {
		cur := nodes[k]
		base, ok := prev[k]
		if !ok {
			base, ok = decodeBaseline(stored[k])
		}
		var r LossReason
		var d string
		switch {
		case ok:
			r, d = lossBetween(base, cur)
		case len(prev) > 0 || (prev == nil && len(stored) > 0):
			r, d = LossNewMaster, "a master not seen at the last tick"
		}
		if r != "" {
			return r, nodeName(k, cur), d
		}
	}
	return "", "", ""
}

// storeBaseline remembers this tick next to the epoch, for the next
// process's first tick.
func (t *Tracker) storeBaseline(ctx context.Context, prev map[string]redisNode, stored map[string]string, nodes map[string]redisNode) {
	var changed []any
	for k, n := range nodes {
		have := stored[k]
		if p, ok := prev[k]; ok {
			have = encodeBaseline(p)
		}
		if want := encodeBaseline(n); have != want {
			changed = append(changed, k, want)
		}
	}
	if len(changed) == 0 {
		return
	}
	if err := t.c.HSet(ctx, t.baselineKey(), changed...).Err(); err != nil {
		// Only a later process's first tick reads it; it would see an
		// older state and move the epoch once more: safe.
		rlog.From(ctx).WithError(err).Debug("reclaim: could not store the redis baseline")
	}
}

func nodeName(k string, n redisNode) string {
	if n.addr != "" {
		return n.addr
	}
	return k
}

// moved counts and logs one move of the epoch.
func (t *Tracker) moved(ctx context.Context, reason LossReason, node, detail string, epoch time.Time) {
	metricEpochMoves.WithLabelValues(reason.String()).Inc()
	t.watch.noteLoss(RedisLoss{At: time.Now().UTC(), Reason: reason, Node: node, Detail: detail, Epoch: epoch.UTC()})
	rlog.From(ctx).WithField("reason", reason).WithField("node", node).WithField("detail", detail).
		Warnf("reclaim: redis may have lost access records (%s); recording epoch moved forward to %s: GC deletes nothing for a full window",
			reason, epoch.UTC().Format(time.RFC3339))
}

// noteNodes keeps this tick's nodes and derives the policy and persistence.
func (t *Tracker) noteNodes(ctx context.Context, nodes map[string]redisNode) {
	w := &t.watch
	keys := slices.Sorted(maps.Keys(nodes))
	pub := make([]RedisNode, 0, len(keys))
	// The policy: the first evicting one, else "" (unknown) if any node's
	// is unknown, else noeviction. Persistence: the weakest.
	policy, evictNode, persistence := "noeviction", "", ""
	for _, k := range keys {
		n := nodes[k]
		pub = append(pub, n.public())
		switch {
		case evictNode != "":
		case n.evicts():
			policy, evictNode = n.policy, nodeName(k, n)
		case n.policy == "":
			policy = ""
		}
		switch p := orUnknown(n.persistence); {
		case persistence == "", p == "none", p == "unknown" && persistence != "none":
			persistence = p
		case p != persistence && persistence != "none" && persistence != "unknown":
			persistence = "mixed"
		}
	}
	w.mu.Lock()
	wasEvicting := w.health.Evicts
	w.nodes = nodes
	w.health.Nodes, w.health.Checked, w.health.Error = pub, time.Now().UTC(), ""
	w.health.MaxmemoryPolicy, w.health.Evicts, w.health.Persistence = policy, evictNode != "", persistence
	warnPol := policy == "" && !w.warnedNoPol
	w.warnedNoPol = w.warnedNoPol || warnPol
	warnPer := persistence == "none" && !w.warnedNoPer
	w.warnedNoPer = w.warnedNoPer || warnPer
	w.mu.Unlock()

	switch {
	case evictNode != "":
		metricRedisEvicts.Set(1)
		if !wasEvicting {
			rlog.From(ctx).WithField("node", evictNode).Errorf("reclaim: redis maxmemory-policy is %s: it may evict access records, fences and tombstones. "+
				"GC refuses to delete (redis_evicts) until it is noeviction", policy)
		}
	default:
		metricRedisEvicts.Set(0)
		if wasEvicting {
			rlog.From(ctx).Infof("reclaim: redis maxmemory-policy is %s again; GC may delete once the epoch is a window old", orUnknown(policy))
		}
	}
	if warnPol {
		rlog.From(ctx).Warn("reclaim: cannot read redis maxmemory-policy (INFO memory, CONFIG GET); evictions still move the recording epoch. Run redis with maxmemory-policy noeviction")
	}
	if warnPer {
		rlog.From(ctx).Warn("reclaim: redis has no persistence (neither AOF nor RDB): a redis restart loses every access record, and GC then deletes nothing for a full window")
	}
}
