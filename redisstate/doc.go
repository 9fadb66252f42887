// Package redisstate is Reclaim's state in Redis, all of it: access
// records and the recording epoch, fences and tombstones, the
// per-repository GC lock and run records, tag fences, the review queue, the
// freed counters, the reclaimer's scrub cursor, and the health of the
// Redis servers that hold them. Beside it: the reclaimable-bytes estimates
// and their rankings (redisstate/usage), retention's record of pulls
// (redisstate/pulls), and the work-list shape the review queue and the
// usage refresh share (redisstate/due). Retention's stores (pins, in-use
// sources, plans) are retention/redisstore.
//
// A Tracker (NewTracker) holds the state the GC protocol rests on: it
// records accesses and takes fences in one atomic step per blob, keeps the
// recording epoch, the locks, the run records and the freed counters, and
// watches Redis for lost writes (redishealth.go). Queue and ScrubCursor
// are the stores beside it, each on keys of its own. Every
// failure to reach Redis wraps reclaim.ErrTrackerUnavailable; a fenced
// object answers reclaim.ErrFenced.
//
// # Key schema
//
// Every key starts with the prefix (default "reclaim:"); every key about one
// blob carries the hash tag {<digest>} so a script can read and write all of
// them atomically in Redis Cluster.
//
//	reclaim:since                    unix ms: recording since (the epoch). Missing = GC must not trust.
//	{reclaim:since}:nodes            hash: each Redis master's last run_id, replid, evicted_keys (redishealth.go)
//	reclaim:{sha256:<hex>}:a         unix ms of the blob's last access          (PX AccessTTL)
//	reclaim:{sha256:<hex>}:a:l:<r>   unix ms of the last access of r's layer link to the blob
//	reclaim:{sha256:<hex>}:a:m:<r>   unix ms of the last access of r's manifest revision link
//	reclaim:{sha256:<hex>}:f         fence on the blob (value: token, PX lease)
//	reclaim:{sha256:<hex>}:f:l:<r>   fence on r's layer link   (":f:m:<r>": on r's revision link)
//	reclaim:{sha256:<hex>}:gone      tombstone: the blob's data was deleted (value: token, PX GoneTTL)
//	reclaim:{sha256:<hex>}:gone:<r>  tombstone: a link of r to the blob was deleted
//	reclaim:{tag:<r>}:f:<tag>        fence on a tag of r (value: token, PX lease; tagfence.go)
//	reclaim:{tag:<r>}:d:<tag>        mark: a deleter fenced that tag lately (PX lease + 1 min, renewed on release)
//	reclaim:run:<r>                  one GC run per repository (value: token, PX lease)
//	reclaim:{reclaim:run:<r>}:...    the repository's GC run records, in the lock's slot (runs.go)
//	reclaim:runid:<id>               the repository of GC run <id>
//	reclaim:runs:recent              sorted set: the newest 500 run ids of every repository, by start
//	reclaim:freed:<yyyy-mm-dd>       hash: bytes, objects, runs GC deleted that UTC day (freed.go; 8 days)
//	reclaim:review                   sorted set: blobs due for review by the reclaimer (queue.go)
//	reclaim:scrub:cursor             where the reclaimer's scrub stands in the catalog (scrub.go)
//	reclaim:{<r>}:usage, reclaim:usage:...  usage estimates, their rankings and cursor (package redisstate/usage)
//	reclaim:{<r>}:pulls              hash: manifest digest -> unix ms of its last counted pull (package redisstate/pulls; retention only, never GC)
//
// Times are Redis server time (TIME inside the scripts), so registry and GC
// processes never compare their own clocks.
package redisstate
