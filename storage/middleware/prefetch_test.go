package middleware

import (
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/manifest/ocischema"
	"github.com/distribution/distribution/v3/manifest/schema2"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// A manifest PUT checks (and re-checks before its revision link,
// revisionrecheck.go) exactly the references Distribution's verification
// stats: a layer that names URLs is statted unless it is a foreign or
// non-distributable layer, so it must be checked too.
func TestImageManifestTouchesFollowDistribution(t *testing.T) {
	layer := func(mt string, urls ...string) v1.Descriptor {
		return v1.Descriptor{MediaType: mt, Digest: digest.FromString(mt + strings.Join(urls, " ")), Size: 1, URLs: urls}
	}
	cases := []struct {
		layer   v1.Descriptor
		checked bool
	}{
		{layer(v1.MediaTypeImageLayerGzip), true},
		{layer(v1.MediaTypeImageLayerGzip, "https://example.com/l"), true},
		{layer(v1.MediaTypeImageLayer, "https://example.com/l"), true},
		{layer(v1.MediaTypeImageLayerNonDistributableGzip, "https://example.com/l"), false}, //nolint:staticcheck // what Distribution still accepts
		{layer(v1.MediaTypeImageLayerNonDistributableGzip), true},                           //nolint:staticcheck
		{layer(schema2.MediaTypeForeignLayer, "https://example.com/l"), false},
	}
	cfg := v1.Descriptor{MediaType: v1.MediaTypeImageConfig, Digest: digest.FromString("config"), Size: 1}
	for _, tc := range cases {
		m, err := ocischema.FromStruct(ocischema.Manifest{
			Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest,
			Config: cfg, Layers: []v1.Descriptor{tc.layer},
		})
		if err != nil {
			t.Fatal(err)
		}
		md := digest.FromString("manifest")
		checked := false
		for _, bt := range imageManifestTouches("r", md, m) {
			checked = checked || bt.Blob == tc.layer.Digest
		}
		if checked != tc.checked {
			t.Errorf("layer %s with URLs %v: checked %v, want %v (as Distribution's verification)", tc.layer.MediaType, tc.layer.URLs, checked, tc.checked)
		}
	}
}
