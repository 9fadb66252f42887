package redisstate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// redisNode is the part of one master's INFO that a tick compares.
type redisNode struct {
	addr        string
	runID       string
	replID      string
	replID2     string
	evicted     int64 // -1: not reported
	policy      string
	maxmemory   int64
	persistence string
}

func (n redisNode) public() RedisNode {
	return RedisNode{Addr: n.addr, RunID: n.runID, MasterReplID: n.replID, EvictedKeys: n.evicted,
		MaxmemoryPolicy: orUnknown(n.policy), Maxmemory: n.maxmemory, Persistence: orUnknown(n.persistence)}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// evicts reports whether the node's policy may evict keys. An unknown
// policy does not count: evicted_keys still moves the epoch.
func (n redisNode) evicts() bool { return n.policy != "" && n.policy != "noeviction" }

// lossBetween compares two ticks of one node. An empty reason means
// nothing can have been lost between them.
func lossBetween(prev, cur redisNode) (LossReason, string) {
	switch {
	case cur.runID != prev.runID:
		if prev.replID != "" && cur.replID2 == prev.replID {
			return LossFailover, fmt.Sprintf("run_id %s -> %s, a replica took over", short(prev.runID), short(cur.runID))
		}
		return LossRestart, fmt.Sprintf("run_id %s -> %s", short(prev.runID), short(cur.runID))
	case cur.replID != prev.replID:
		return LossFailover, fmt.Sprintf("master_replid %s -> %s", short(prev.replID), short(cur.replID))
	case prev.evicted >= 0 && cur.evicted > prev.evicted:
		return LossEvicted, fmt.Sprintf("evicted_keys %d -> %d", prev.evicted, cur.evicted)
	case prev.evicted >= 0 && cur.evicted >= 0 && cur.evicted < prev.evicted:
		return LossStatsReset, fmt.Sprintf("evicted_keys %d -> %d with the same run_id", prev.evicted, cur.evicted)
	}
	return "", ""
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// parseInfo reads INFO's "key:value" lines (all sections together).
func parseInfo(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// nodeFromInfo builds a node from parsed INFO; ok is false without a
// run_id (not a real Redis INFO, e.g. miniredis).
func nodeFromInfo(addr string, m map[string]string) (n redisNode, ok bool) {
	n = redisNode{addr: addr, runID: m["run_id"], replID: m["master_replid"], replID2: m["master_replid2"],
		evicted: -1, policy: m["maxmemory_policy"]}
	if v, err := strconv.ParseInt(m["evicted_keys"], 10, 64); err == nil {
		n.evicted = v
	}
	n.maxmemory, _ = strconv.ParseInt(m["maxmemory"], 10, 64)
	n.persistence = persistenceOf(m["aof_enabled"], nil)
	return n, n.runID != ""
}

// persistenceOf names the persistence from aof_enabled and the save
// configuration (save == nil: CONFIG GET not allowed).
func persistenceOf(aof string, save *string) string {
	var rdb, known bool
	if save != nil {
		rdb, known = strings.TrimSpace(*save) != "", true
	}
	switch {
	case aof == "1" && rdb:
		return "aof+rdb"
	case aof == "1":
		return "aof"
	case rdb:
		return "rdb"
	case known && aof == "0":
		return "none"
	}
	return ""
}

// readNode reads one server's INFO in one round trip (one pipeline, so one
// connection: one server even while a Sentinel client switches masters).
// Sections are asked one by one: Redis before 7 takes a single section.
func readNode(ctx context.Context, c redis.UniversalClient, addr string) (redisNode, error) {
	pipe := c.Pipeline()
	sections := []*redis.StringCmd{
		pipe.Info(ctx, "server"), pipe.Info(ctx, "replication"), pipe.Info(ctx, "stats"),
		pipe.Info(ctx, "persistence"), pipe.Info(ctx, "memory"),
	}
	save := pipe.ConfigGet(ctx, "save")
	_, _ = pipe.Exec(ctx) // errors are read per command below
	m := map[string]string{}
	for _, s := range sections {
		if err := s.Err(); err != nil {
			return redisNode{}, err
		}
		for k, v := range parseInfo(s.Val()) {
			m[k] = v
		}
	}
	n, ok := nodeFromInfo(addr, m)
	if !ok {
		return n, errInfoUnsupported
	}
	if v, ok := save.Val()["save"]; ok && save.Err() == nil {
		n.persistence = persistenceOf(m["aof_enabled"], &v)
	}
	if n.policy == "" {
		// INFO memory has had maxmemory_policy since Redis 3.2; older or
		// unusual servers: ask CONFIG, which managed services often forbid.
		if v, err := c.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil {
			n.policy = v["maxmemory-policy"]
		}
	}
	return n, nil
}

var errInfoUnsupported = errors.New("INFO has no run_id")

// unsupported reports whether err says the server will never answer INFO
// usefully (not a transient failure): ACL denies it, the command or section
// is unknown (miniredis), or the reply has no run_id. Transient server
// errors (LOADING, BUSY, MASTERDOWN, CLUSTERDOWN, ...) are failures.
func unsupported(err error) bool {
	if errors.Is(err, errInfoUnsupported) {
		return true
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "unknown command") || strings.Contains(msg, "not supported")
}

// readNodes reads every master: Redis Cluster's each by address, any other
// client's one server under the key "master".
func (t *Tracker) readNodes(ctx context.Context) (map[string]redisNode, error) {
	if cc, ok := t.c.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		out := map[string]redisNode{}
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			addr := c.Options().Addr
			n, err := readNode(ctx, c, addr)
			if err != nil {
				return fmt.Errorf("%s: %w", addr, err)
			}
			mu.Lock()
			out[addr] = n
			mu.Unlock()
			return nil
		})
		return out, err
	}
	addr := ""
	if c, ok := t.c.(*redis.Client); ok {
		addr = c.Options().Addr
	}
	n, err := readNode(ctx, t.c, addr)
	return map[string]redisNode{"master": n}, err
}

// baselineKey holds the last tick's view of every master (field: node,
// value: "run_id master_replid evicted_keys"), in the epoch's hash slot.
func (t *Tracker) baselineKey() string {
	k := t.sinceKey()
	if i := strings.IndexByte(k, '{'); i >= 0 {
		if j := strings.IndexByte(k[i+1:], '}'); j > 0 {
			return k + ":nodes" // the prefix carries a hash tag already
		}
	}
	return "{" + k + "}:nodes"
}

func encodeBaseline(n redisNode) string {
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	return dash(n.runID) + " " + dash(n.replID) + " " + strconv.FormatInt(n.evicted, 10)
}

func decodeBaseline(s string) (redisNode, bool) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return redisNode{}, false
	}
	ev, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return redisNode{}, false
	}
	undash := func(s string) string {
		if s == "-" {
			return ""
		}
		return s
	}
	return redisNode{runID: undash(f[0]), replID: undash(f[1]), evicted: ev}, true
}
