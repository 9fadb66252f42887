/*
Package reclaimer frees, in the background, blobs that lost their last
reference, without anybody walking the registry. The storage middleware
queues a blob for review (due W later) whenever one of its reverse links
is removed and whenever an upload is committed; every registry instance may
run a reclaimer; each tick claims a batch of due items and gives each the
same deletion step a collection gives a blob whose last link it removed
(collector.Orphans):

	reverse links listed: any -> dropped (linked_elsewhere); the next unlink queues it again
	accessed within W      -> re-queued at last access + W (recently_accessed)
	fence the blob (refused if accessed meanwhile), list reverse links again,
	delete the blob directory through the wrapped driver, evict, release

A tick deletes nothing when the tracker cannot be trusted (Redis down,
epoch missing or younger than W) or the reverse-link database is not known
to be complete; the items stay queued. A claim is a lease: an instance
that dies mid-batch leaves its items to come back after the lease, and the
fence, not the lease, is what keeps two deleters apart.

Each tick also refreshes a few repositories' usage estimates (usage.go)
and scrubs a few repositories for missing reverse links (scrub.go), so
neither ever costs a request O(registry).

Every capability is a Config field, none is discovered by type assertion;
the registry wires them (registry/reclaimer.go).
*/
package reclaimer
