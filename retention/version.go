package retention

import (
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
)

// TagInfo is one tag as storage holds it: the manifest its current link
// names, and when that link was written.
type TagInfo struct {
	Name   string
	Digest digest.Digest
	Time   time.Time
}

// Version is one manifest the managed tags of a repository point at.
//
// "Newest" is the time a tag was last pointed at the manifest (the
// modification time of the tag's current link), the newest over the
// version's tags: when the version was pushed, or re-tagged, here. Image
// creation dates (config "created", annotations) are set by builders and
// are not used: a rebuilt old image would sort as old. Ties sort by
// digest, so the order is total.
type Version struct {
	Digest digest.Digest `json:"digest"`
	Tags   []string      `json:"tags"`
	Time   time.Time     `json:"time"`
}

// Versions groups the tags p manages by manifest, newest first.
func Versions(tags []TagInfo, p Policy) []Version {
	byDigest := map[digest.Digest]*Version{}
	var out []*Version
	for _, t := range tags {
		if !p.manages(t.Name) {
			continue
		}
		v := byDigest[t.Digest]
		if v == nil {
			v = &Version{Digest: t.Digest}
			byDigest[t.Digest] = v
			out = append(out, v)
		}
		v.Tags = append(v.Tags, t.Name)
		if t.Time.After(v.Time) {
			v.Time = t.Time
		}
	}
	vs := make([]Version, len(out))
	for i, v := range out {
		sort.Strings(v.Tags)
		vs[i] = *v
	}
	sort.Slice(vs, func(i, j int) bool {
		if !vs[i].Time.Equal(vs[j].Time) {
			return vs[i].Time.After(vs[j].Time)
		}
		return vs[i].Digest < vs[j].Digest
	})
	return vs
}
