package linkdb

import (
	"encoding/json"
	"fmt"

	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// maxManifestSize bounds what rebuild reads to look for a subject. It is
// Distribution's own limit for a manifest PUT, so a revision link to anything
// larger does not point at a manifest.
const maxManifestSize = 4 << 20

// manifestHead is the part of an image manifest or index the referrers
// index needs.
type manifestHead struct {
	MediaType    string            `json:"mediaType"`
	ArtifactType string            `json:"artifactType"`
	Config       *v1.Descriptor    `json:"config"`
	Subject      *v1.Descriptor    `json:"subject"`
	Annotations  map[string]string `json:"annotations"`
}

// referrerDescriptor returns the referrers index entry for the manifest
// payload with digest dgst, or ok false when it has no subject. An
// unparsable payload is an error: the caller must not conclude "no subject".
func referrerDescriptor(payload []byte, dgst digest.Digest) (subject digest.Digest, desc v1.Descriptor, ok bool, err error) {
	var m manifestHead
	if err := json.Unmarshal(payload, &m); err != nil {
		return "", desc, false, fmt.Errorf("manifest %s: %w", dgst, err)
	}
	if m.Subject == nil {
		return "", desc, false, nil
	}
	if err := m.Subject.Digest.Validate(); err != nil {
		return "", desc, false, fmt.Errorf("manifest %s: subject: %w", dgst, err)
	}
	desc = v1.Descriptor{
		MediaType:    m.MediaType,
		Digest:       dgst,
		Size:         int64(len(payload)),
		ArtifactType: m.ArtifactType,
		Annotations:  m.Annotations,
	}
	// OCI distribution-spec: with no artifactType, the config's media type
	// is the referrer's artifact type.
	if desc.ArtifactType == "" && m.Config != nil {
		desc.ArtifactType = m.Config.MediaType
	}
	return m.Subject.Digest, desc, true, nil
}
