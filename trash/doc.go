/*
Package trash makes Reclaim's deletions recoverable for a while
(trash.keep > 0): what a collect, the reclaimer or a retention apply
removes is gone from /v2/ at once, but a hold keeps its data and records
what it was, so it can be put back exactly until the entry expires and is
purged.

The record is a hold on the blob that holds the bytes, stored next to the
blob's reverse links (storage/layout.TrashHoldPath): the storage is the
truth, so losing Redis loses no entry, and every check that asks whether
anything links a blob keeps a held one (reclaim.ReasonInTrash). Redis
holds only an index (index.go): entries by id, by expiry (purge order),
and by the name a pull asks for (one round trip tells a 404 whether it
asked for something in the trash).

Bin writes and drops holds for the deleters (gc/collector.TrashHolder,
retention's tag delete), lists entries, restores them through the
middleware's driver with the fence protocol a push follows (restore.go),
and purges expired ones (purge.go), deleting a blob's data only through
the collector's own checks (Purger).
*/
package trash
