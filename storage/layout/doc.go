// Package layout is the storage tree: where Distribution keeps each file
// under /docker/registry/v2 and where Reclaim adds its own (reverse links,
// the referrers index, the linkdb marker), drawn in full in paths.go.
//
// Classify is the one parser of those paths (a path's PathKind and what it
// names); the *Path and *Dir functions build them. The walks over the tree
// live here too, so every package reads it the same way: the blob store
// shard by shard (Shards, WalkShard), a page of the catalog
// (Repositories), and Probe, which looks at a link path a walk did not
// find (a directory or a dangling entry there is never "absent"). The
// package knows no Redis and no HTTP: only paths and a storage driver.
package layout
