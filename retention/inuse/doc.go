/*
Package inuse is the in-use scanner of deploy-aware retention: it reads the
image references out of Kubernetes YAML (plain streams, Helm output,
Kustomize trees with their `images:` overrides) and names what a deploy
source runs, Image by Image.

Scan and ScanReader read files and streams within Limits, fail closed on
anything they cannot read, and return each reference Found with where it
is; ParseImage splits a reference as Kubernetes does. Image and Source are
the words of the in-use index that retention plans against and that
retention/redisstore stores; the CLI's `inuse scan` (cmd/registry)
resolves the references to digests and declares them.

The package does no I/O besides reading the files it is asked to scan.
*/
package inuse
