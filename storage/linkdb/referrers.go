package linkdb

// maxManifestSize bounds what rebuild and verify read to look for a subject.
// It is Distribution's own limit for a manifest PUT, so a revision link to
// anything larger does not point at a manifest.
const maxManifestSize = 4 << 20
