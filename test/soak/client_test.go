package soak

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// send sends one request to r with r's credentials; target is a path
// ("/v2/...") or an absolute URL (a Location header).
func send(ctx context.Context, r *registrytest.Registry, method, target string, hdr map[string]string, body []byte) (*http.Response, error) {
	if strings.HasPrefix(target, "/") {
		target = r.URL + target
	}
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if r.Username != "" {
		req.SetBasicAuth(r.Username, r.Password)
	}
	return http.DefaultClient.Do(req)
}

// statusClass is "<status> <CODE>" from a registry error body, else
// "<status> -".
func statusClass(status int, body []byte) string {
	var eb struct {
		Errors []struct{ Code string } `json:"errors"`
	}
	if json.Unmarshal(body, &eb) == nil && len(eb.Errors) > 0 {
		return fmt.Sprintf("%d %s", status, eb.Errors[0].Code)
	}
	return fmt.Sprintf("%d -", status)
}

// errorClass names an error by what a client would see: "<status> <CODE>"
// for registry errors, a short label otherwise.
func errorClass(err error) string {
	var te *transport.Error
	if errors.As(err, &te) {
		code := "-"
		if len(te.Errors) > 0 {
			code = string(te.Errors[0].Code)
		}
		return fmt.Sprintf("%d %s", te.StatusCode, code)
	}
	var ve *verifyError
	if errors.As(err, &ve) {
		return ve.class
	}
	var cr *collectRefused
	if errors.As(err, &cr) {
		return cr.reason
	}
	s := err.Error()
	switch {
	case strings.Contains(s, "connection refused"), strings.Contains(s, "EOF"), strings.Contains(s, "connection reset"):
		return "connection"
	case strings.Contains(s, "unexpected status code"):
		return s[strings.Index(s, "unexpected status code"):]
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return "other: " + s
}

// retryable reports whether a push error is a refusal the client should
// retry (the fence protocol's 503/429, a busy instance), not a failure.
func retryable(err error) bool {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode == http.StatusServiceUnavailable || te.StatusCode == http.StatusTooManyRequests
	}
	return false
}

// lossClass reports whether a pull failure means referenced data is gone.
func lossClass(class string) bool {
	return strings.Contains(class, "BLOB_UNKNOWN") || strings.Contains(class, "digest_mismatch") ||
		strings.Contains(class, "child_missing") || strings.Contains(class, "404 -")
}

// remoteOpts are the client options: no retries inside ggcr, so that every
// refusal is seen and counted here.
func remoteOpts(ctx context.Context, r *registrytest.Registry) []remote.Option {
	auth := authn.Anonymous
	if r.Username != "" {
		auth = &authn.Basic{Username: r.Username, Password: r.Password}
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth),
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}), remote.WithJobs(2)}
}

func ref(r *registrytest.Registry, s string) (name.Reference, error) {
	return name.ParseReference(r.Host+"/"+s, name.Insecure, name.StrictValidation)
}

type verifyError struct {
	class  string
	detail string
	// missing is the manifest or blob that was not there, when known.
	missing v1.Hash
}

func (e *verifyError) Error() string { return e.class + ": " + e.detail }

// pullVerify pulls ref (an image or an index, recursively) from r and reads
// every blob, checking its digest. It returns the manifest digest.
func pullVerify(ctx context.Context, r *registrytest.Registry, repo, reference string) (v1.Hash, error) {
	rf, err := ref(r, repo+reference)
	if err != nil {
		return v1.Hash{}, err
	}
	desc, err := remote.Get(rf, remoteOpts(ctx, r)...)
	if err != nil {
		return v1.Hash{}, err
	}
	if got := sha256Hex(desc.Manifest); "sha256:"+got != desc.Digest.String() {
		return desc.Digest, &verifyError{"digest_mismatch", "manifest " + desc.Digest.String(), desc.Digest}
	}
	if desc.MediaType.IsIndex() {
		return desc.Digest, pullChildren(ctx, r, repo, desc)
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return desc.Digest, err
	}
	for _, b := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		if err := fetchBlob(ctx, r, repo, b.Digest); err != nil {
			return desc.Digest, err
		}
	}
	return desc.Digest, nil
}

// pullChildren pull-verifies every child of the index desc.
func pullChildren(ctx context.Context, r *registrytest.Registry, repo string, desc *remote.Descriptor) error {
	idx, err := desc.ImageIndex()
	if err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, child := range im.Manifests {
		if _, err := pullVerify(ctx, r, repo, "@"+child.Digest.String()); err != nil {
			if strings.Contains(errorClass(err), "MANIFEST_UNKNOWN") {
				return &verifyError{"child_missing", fmt.Sprintf("index %s child %s: %v", desc.Digest, child.Digest, err), child.Digest}
			}
			return err
		}
	}
	return nil
}

// fetchBlob GETs a blob and checks its digest.
func fetchBlob(ctx context.Context, r *registrytest.Registry, repo string, d v1.Hash) error {
	resp, err := send(ctx, r, http.MethodGet, "/v2/"+repo+"/blobs/"+d.String(), nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return &verifyError{statusClass(resp.StatusCode, b), "blob " + d.String() + " of " + repo, d}
	}
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		return err
	}
	if "sha256:"+hex.EncodeToString(h.Sum(nil)) != d.String() {
		return &verifyError{"digest_mismatch", "blob " + d.String(), d}
	}
	return nil
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// listTags returns repo's tags (none when the repository is gone).
func listTags(ctx context.Context, r *registrytest.Registry, repo string) ([]string, error) {
	rp, err := name.NewRepository(r.Host+"/"+repo, name.Insecure)
	if err != nil {
		return nil, err
	}
	tags, err := remote.List(rp, remoteOpts(ctx, r)...)
	var te *transport.Error
	if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	return tags, err
}

// referrers lists the referrer digests of subject in repo.
func referrers(ctx context.Context, r *registrytest.Registry, repo string, subject v1.Hash) ([]v1.Hash, error) {
	resp, err := send(ctx, r, http.MethodGet, "/v2/"+repo+"/referrers/"+subject.String(), nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("referrers of %s: %d", subject, resp.StatusCode)
	}
	var idx v1.IndexManifest
	if err := json.NewDecoder(resp.Body).Decode(&idx); err != nil {
		return nil, err
	}
	out := make([]v1.Hash, 0, len(idx.Manifests))
	for _, m := range idx.Manifests {
		out = append(out, m.Digest)
	}
	return out, nil
}

// mount asks r to mount blob d from repository from into to and returns
// the status (0 when the request failed). A refused mount (202) starts an
// upload, which mount cancels.
func mount(ctx context.Context, r *registrytest.Registry, from, to string, d v1.Hash) int {
	resp, err := send(ctx, r, http.MethodPost, fmt.Sprintf("/v2/%s/blobs/uploads/?mount=%s&from=%s", to, d, from), nil, nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	diagf("mount %s from %s into %s via %s: %d", d, from, to, r.URL, resp.StatusCode)
	if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusAccepted && loc != "" {
		del(ctx, r, loc)
	}
	return resp.StatusCode
}

// del sends a DELETE to target (a path or an absolute URL) and returns the
// status, 0 when the request failed.
func del(ctx context.Context, r *registrytest.Registry, target string) int {
	resp, err := send(ctx, r, http.MethodDelete, target, nil, nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	diagf("DELETE %s via %s: %d", target, r.URL, resp.StatusCode)
	return resp.StatusCode
}

func remoteWrite(ctx context.Context, rf name.Reference, img v1.Image, r *registrytest.Registry) error {
	return remote.Write(rf, img, remoteOpts(ctx, r)...)
}
