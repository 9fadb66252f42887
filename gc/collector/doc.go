/*
Package collector collects one repository of a Distribution registry while the
registry keeps serving: it deletes untagged manifests, unlinks layers no kept
manifest references, and deletes blobs that no repository links any more.

# Basics

A run reads the repository once (tags, manifest revisions, layer links, and
every revision's manifest: the snapshot), then gathers the facts a decision
may need (pins, access records, reverse links, blob sizes; a few at a time,
a failed read being a fact too), then decides every object it looked at:
one gc.Decision with one typed Reason each. Deciding does no I/O, so the same
snapshot and facts always give the same decisions. A dry run stops there
and reports exactly what a real run would delete now. A real run then
deletes (the delete phase):

	for each deletable object (manifests first, an index before its children,
	then layer links, then blobs whose last link the run removed):
	    take the tracker's fence on it  (fails if accessed within the window)
	    re-read what the decision depends on (tags, pins, links, reverse links)
	    delete it through the wrapped storage driver
	    release the fence

The mark: every tag's current manifest is a root ("sha256-<hex>" referrers
fallback tags too, they are tags). A kept manifest keeps its index children,
its config and layers, and its referrers (revisions whose OCI subject is a
kept manifest), to a fixpoint. An untagged manifest nothing keeps is still
kept when the untagged policy is "keep", when a Pinner pins it, or when its
link was accessed (pulled by digest, pushed, linked) within the protection
window W. A layer link is kept when a kept manifest references it or when it
was accessed within W, which covers a push in progress: blobs are uploaded
before the manifest that references them.

A blob is deleted only when the reverse-link database lists no repository
linking it, nobody accessed it within W, and nobody fences it. A blob another
repository links is never touched.

# Fail closed

A run deletes nothing and returns an *AbortError when the tracker is
unreachable, when it has been recording for less than W (Redis lost its
data), when the reverse-link database's completeness marker cannot be read,
or when any tag or manifest of the repository cannot be read or parsed: an
unreadable manifest never looks like one that references nothing. The
reclaimer checks the same preconditions before every tick. A dry run is a
preview: when Redis answers but cannot be trusted yet (recording for less
than W, no epoch, a policy that may evict) it plans anyway and lists those
preconditions in Report.Blockers, each with what it blocks and, when it
clears by itself, until when.
A manifest of an unknown media type is kept, and because its references are
unknown, so is every other manifest and layer link of the repository. Until
the reverse-link database is known to be complete, links may be removed but
no blob is deleted.

# Reduce, don't abort

A cap bounds the link deletions of one run (oldest access first; the rest is
kept as "capped", together with everything it keeps). A failing delete or
check keeps that object, is reported, and the run goes on. "Already gone"
counts as done.

# Usage

Collector.Usage estimates what a collect of a repository would free now
and what only that repository holds (gc/usage.go): a dry run under the
configured policy, plus a bounded reverse-link check (ListFor) of each
blob the repository links. Anything uncertain counts for nothing, so both
numbers are lower bounds. Runs write the usage they make or leave to the
configured UsageStore, and each reclaimer tick refreshes a few more
(reclaimer_usage.go).

# Caveats

Plans live in the memory of the instance that made them: apply a plan on the
instance that made it (or get 404 and make a new one). Run reports are kept
in memory for a day.
The package imports no HTTP and no Redis types: it declares the Tracker,
LinkIndex, Pinner and Evictor it needs, and the registry wires them up.
*/
package collector
