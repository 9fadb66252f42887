// Package linkdb rebuilds and verifies Reclaim's link database: the reverse
// links stored next to every blob ("repository <name> links this blob") and
// the referrers index, both derived from Distribution's forward links.
//
// # Basics
//
// Distribution records links one way: repositories/<name>/_layers and
// _manifests/revisions point at blobs. Reclaim's storage middleware writes
// the reverse link before it lets a forward link be written, and removes it
// after the forward link is gone, so from its deployment on the database is
// complete. Rebuild covers what was written before:
//
//  1. Repositories phase: walk every repository's layer and revision links;
//     write each missing reverse link and each missing referrers index entry
//     (manifests with an OCI subject); remove referrers entries whose
//     manifest is gone. When every repository was read, write the marker
//     "complete since <start>" (MarkLinkDBComplete) in the storage.
//  2. Blobs phase: walk the blob store shard by shard (blobs/<alg>/<2>) and
//     remove reverse links whose forward link is gone.
//
// Verify walks the same two ways, read-only, and reports each inconsistency
// as a Problem of one Kind, with exit codes for scripts.
//
// # Caveats
//
// Removing a stale reverse link races a push that re-links the blob (the
// push writes the reverse link, then the forward one). Rebuild removes one
// only under the link's GC fence (Fencer, backed by redisstate.Tracker) after a
// fresh re-check, or with Offline when nothing serves the storage; otherwise
// stale entries are reported and kept, which is always safe. Adding reverse
// links needs no fence: an extra reverse link only makes GC keep more.
//
// Nothing unreadable is ever taken as absent: a repository that cannot be
// read makes the rebuild incomplete (no marker) and stops verify from
// calling any blob reclaimable; a blob directory that cannot be read is
// reported, not reclaimable. A corrupt forward link keeps the blob its path
// names linked.
//
// A reverse link the rebuild adds is durable before the marker and before
// any checkpoint that lists its repository, not one by one: on the
// filesystem driver (RebuildOptions.FilesystemRoot) it is written without
// an fsync and made durable by one syncfs (linkWriter's barrier); on other
// drivers each write is durable already.
//
// Memory does not grow with the number of blobs: walks stream through the
// driver's Walk, findings are counted exactly but kept only up to a bound,
// and the checkpoint records finished repositories and shards, not links.
// Pass the raw driver (no middleware): linkdb's reads are not client
// accesses, and it writes reverse links itself.
package linkdb
