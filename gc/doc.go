/*
Package gc is the decision of a collection, and nothing else: given one
read of a repository (a Snapshot) and the facts gathered about its objects
(Facts: pins, access records, reverse links, blob sizes, a failed read
being a fact too), Decide reaches one Decision with one typed Reason for
every object, and lists what to delete in the order to delete it. It does
no I/O, so the same snapshot and facts always give the same decisions: a
dry run and a real run that read the same storage decide the same.

# The mark

Every tag's current manifest is a root ("sha256-<hex>" referrers fallback
tags too, they are tags). A kept manifest keeps its index children, its
config and layers, and its referrers (revisions whose OCI subject is a kept
manifest), to a fixpoint. An untagged manifest nothing keeps is still kept
when the policy keeps untagged manifests, when it is pinned, or when its
link was accessed (pulled by digest, pushed, linked) within the protection
window W. A layer link is kept when a kept manifest references it or when
it was accessed within W, which covers a push in progress: blobs are
uploaded before the manifest that references them.

A blob is deleted only when the reverse-link database is known complete,
lists no repository linking it besides the links the plan removes, and
nobody accessed it within W. A blob another repository links is never
touched.

# Fail closed

A fact that could not be read keeps the object it is about (check_failed),
and so does a fact nobody gathered (ErrNoFact): Wanted lists what Decide
may read. A manifest of an unknown media type is kept, and because its
references are unknown, so is every other manifest and layer link of the
repository.

# Reduce, don't abort

A cap bounds the link deletions of one run (oldest access first; the rest
is kept as "capped", together with everything it keeps).

The collector (gc/collector) reads the snapshot and the facts, and deletes
what Decide lists under fences, re-checking each blob under its fence with
LinksKeep; its reclaimer reviews single blobs with DecideBlob. This package imports nothing that does I/O
(test/architecture_test.go): only the words (package reclaim), go-digest
and the standard library.
*/
package gc
