/*
Package reclaim holds the words every part of Reclaim speaks: the objects
GC looks at and the links that keep them, why a run keeps or deletes each
one, why a run stops before deleting anything, a repository's
reclaimable-bytes estimate, and the errors the access tracker returns.
The words of one GC run (its status and step, what it writes ahead and
leaves in Redis, the lock it works under) are its sub-package gcrun.

The storage middleware records and fences an Object; the tracker (Redis)
keeps gcrun.State, Usage and the review queue's ReviewItem and wraps its
failures in the sentinels below; the link database lists RepoLink; gc
decides with a Reason per object and aborts with an AbortReason; the GC
API, the console and the metrics print the same names; a deleter holds
a fence as a Hold and a run its lock as a gcrun.Handle. Each word is
defined here once, so no package translates another's and nobody
re-exports them under a second name.

It imports nothing of the project but internal/enum, the table behind
Reason and AbortReason (and the standard library and go-digest): every
package may import it, and it never learns about
storage paths, Redis or HTTP. The storage tree itself is storage/layout's.

The string forms (Reason names, AbortReason, gcrun's Status and Step,
ObjectKind, LinkKind) are the API: the JSON reports, the run records in
Redis, the reverse-link paths and the metrics use them, so renaming one is
an API change.
*/
package reclaim
