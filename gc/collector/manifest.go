package collector

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/distribution/v3/manifest/manifestlist"
	_ "github.com/distribution/distribution/v3/manifest/ocischema" // registers the OCI manifest and index
	"github.com/distribution/distribution/v3/manifest/schema2"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// knownMediaTypes are the manifest types Distribution accepts on push. The
// schema packages imported above register their unmarshal functions with
// distribution.UnmarshalManifest in init.
var knownMediaTypes = map[string]bool{
	schema2.MediaTypeManifest:          true,
	v1.MediaTypeImageManifest:          true,
	manifestlist.MediaTypeManifestList: true,
	v1.MediaTypeImageIndex:             true,
}

// readManifest reads and parses one revision. Unknown media types are not an
// error (the manifest is kept); anything unreadable or unparsable is.
func readManifest(ctx context.Context, d storagedriver.StorageDriver, m *gc.Manifest) error {
	b, err := d.GetContent(ctx, layout.BlobDataPath(m.Digest))
	if err != nil {
		return abort(reclaim.AbortManifestUnreadable, fmt.Errorf("read manifest %s: %w", m.Digest, err))
	}
	if m.Digest.Algorithm().FromBytes(b) != m.Digest {
		return abort(reclaim.AbortManifestUnreadable, fmt.Errorf("manifest %s: content does not match its digest", m.Digest))
	}
	m.Size = int64(len(b))
	return parseManifest(m, b)
}

func parseManifest(m *gc.Manifest, b []byte) error {
	var v struct {
		SchemaVersion int              `json:"schemaVersion"`
		MediaType     string           `json:"mediaType"`
		Subject       *v1.Descriptor   `json:"subject"`
		Manifests     *json.RawMessage `json:"manifests"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return abort(reclaim.AbortManifestUnreadable, fmt.Errorf("manifest %s: %w", m.Digest, err))
	}
	mt := v.MediaType
	if v.SchemaVersion == 2 && mt == "" {
		// OCI allows the media type to be absent; decide as Distribution does.
		mt = v1.MediaTypeImageManifest
		if v.Manifests != nil {
			mt = v1.MediaTypeImageIndex
		}
	}
	m.MediaType = mt
	if !knownMediaTypes[mt] || v.SchemaVersion != 2 {
		return nil // unknown: kept and reported, never guessed at
	}
	parsed, _, err := distribution.UnmarshalManifest(mt, b)
	if err != nil {
		return abort(reclaim.AbortManifestUnreadable, fmt.Errorf("manifest %s: %w", m.Digest, err))
	}
	m.Known = true
	for _, r := range parsed.References() {
		if r.Digest.Validate() != nil {
			return abort(reclaim.AbortManifestUnreadable, fmt.Errorf("manifest %s: invalid reference %q", m.Digest, r.Digest))
		}
		m.Refs = append(m.Refs, r.Digest)
	}
	if v.Subject != nil {
		if v.Subject.Digest.Validate() != nil {
			return abort(reclaim.AbortManifestUnreadable, fmt.Errorf("manifest %s: invalid subject %q", m.Digest, v.Subject.Digest))
		}
		m.Subject = v.Subject.Digest
	}
	return nil
}
