// Package redisstore is retention's state in Redis: pins, the in-use index,
// retention plans and what became of them (applies, aborted previews).
//
// # Key schema
//
// Every key starts with the registry's prefix (default "reclaim:"), as the
// keys of redisstate do. The keys of one repository share the hash tag
// {<repository>} and the keys of one source share {inuse:<source>}, so each
// is one slot in Redis Cluster and a source is replaced atomically (MULTI).
// Repository names hold no ':' and source names no '{', '}' or ':', so the
// two families cannot meet.
//
//	reclaim:{<repo>}:pins                hash: <tag or digest> -> JSON pin.Pin
//	reclaim:{inuse:<source>}:images      set: "<repo>@<digest>", what the source declared last
//	reclaim:{inuse:<source>}:meta        JSON inuse.Source (name, updated_at, images)
//	reclaim:inuse:sources                set of source names (written before a source, removed after)
//	reclaim:{<repo>}:retention:plan:<id> JSON retention.Plan (expires after retention.plankeep)
//	reclaim:{<repo>}:retention:plans     zset: plan id -> created (unix ms)
//	reclaim:retention:plans              zset: "<repo>|<id>" -> created (one slot, one ZADD per plan)
//	reclaim:{<repo>}:retention:applies:<id> list: JSON retention.ApplyReport of each apply (the newest 10; expires with the plan)
//	reclaim:retention:aborted            zset: JSON AbortedPreview -> when (unix ms), the newest 200
//
// An expired pin is ignored on read and removed by the next listing, only
// if it was not replaced meanwhile.
package redisstore
