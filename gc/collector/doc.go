/*
Package collector collects one repository of a Distribution registry while
the registry keeps serving: it reads the repository, gathers the facts the
decision needs, lets package gc decide, and deletes untagged manifests,
layer links no kept manifest references, and blobs that no repository links
any more, each under a fence. It also keeps the books of its runs: plans,
reports, shared run records, the reconciliation of interrupted runs, and
the usage a run leaves behind.

# Basics

A run checks its preconditions, reads the repository once (tags, manifest
revisions, layer links, and every revision's manifest: the snapshot), then
gathers the facts gc.Wanted lists (pins, access records, reverse links,
blob sizes; a few at a time, a failed read being a fact too), then calls
gc.Decide: one Decision with one typed Reason for every object it looked
at. A dry run stops there and reports exactly what a real run would delete
now. A real run then deletes (the delete phase, deletephase.go):

	for each deletable object (manifests first, an index before its children,
	then layer links, then blobs whose last link the run removed):
	    take the tracker's fence on it  (fails if accessed within the window)
	    re-read what the decision depends on (tags, pins, links, reverse links)
	    delete it through the wrapped storage driver
	    release the fence

The delete phase is not `registry gc sweep` (cmd/registry/sweep.go), which
walks the whole store for orphaned blobs.

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
clears by itself, until when. Until the reverse-link database is known to
be complete, links may be removed but no blob is deleted.

# Reduce, don't abort

A failing delete or check keeps that object, is reported, and the run goes
on. "Already gone" counts as done.

# Usage

Collector.Usage estimates what a collect of a repository would free now
and what only that repository holds (usage.go): a dry run under the
configured policy, plus a bounded reverse-link check (LinkIndex.ListFor)
of each blob the repository links. Anything uncertain counts for nothing,
so both numbers are lower bounds. Runs write the usage they make or leave
to Config.Usage, and each reclaimer tick refreshes a few more
(gc/reclaimer).

# Caveats

A Plan lives in the memory of the instance whose Preview made it, for
Config.PlanTTL: apply it on that instance (elsewhere, or later, the answer
is ErrPlanNotInMemory and a new preview). Reports: this process keeps the
report of each run it ran in memory for a day (Run, Runs; at most 1,000
finished ones). A real run also writes a record to Config.Runs when it is
set, and LookupRun and RecentRuns read those records, so any instance
finds any instance's real runs for as long as the tracker keeps them (a
day after their last write), and a run whose process died reads "interrupted". Dry runs are
known only to the process that ran them.

Every capability is a Config field; nil means the documented default, and
none is discovered by type assertion. The package imports no HTTP and no
Redis types: it declares the Tracker, LinkIndex, Pinner, RunRecorder and
the other small interfaces it needs, and the registry wires them up.
*/
package collector
