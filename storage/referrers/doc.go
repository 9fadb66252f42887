// Package referrers is the OCI referrers index Reclaim keeps on storage
// (Index): it answers "which manifests in <repo> name <subject> as their
// OCI subject?" without reading every manifest of the repository. Of makes
// a manifest's index entry (its subject and descriptor); BodyCopy keeps a
// copy of a manifest PUT's body as Distribution reads it, so the entry is
// made without reading the manifest again.
//
// # Layout
//
// One small file per (subject, referrer) pair, in the repository, next to
// Distribution's own manifest links:
//
//	<root>/docker/registry/v2/repositories/<name>/_manifests/referrers/
//	    <subject-alg>/<subject-hex>/<referrer-alg>/<referrer-hex>/link
//
// The link holds the referrer's OCI descriptor as JSON (mediaType, digest,
// size, artifactType, annotations): exactly the entry the referrers API
// returns, so a query costs one listing per algorithm plus one read per
// referrer and never touches the manifests themselves.
//
// Distribution walks only _manifests/revisions (manifest enumeration, upstream
// garbage-collect) and _manifests/tags (tag listing); its catalog stops at
// _manifests; deleting a repository removes the whole directory, index
// included. So nothing upstream ever sees these files. One file per pair
// (instead of one list per subject) makes Add and Remove single writes that
// need no read-modify-write and cannot lose a concurrent update.
//
// The index is derived data: the manifests are the truth, and `linkdb
// rebuild` recreates the index from them.
package referrers
