package registry

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/registry/gcapi"
)

// Only sha256 creates links while the reclaim middleware runs.
//
// Distribution stores every blob under its sha256 digest. A blob committed
// as sha512:<x> (or mounted, or a manifest pushed, by a sha512 reference)
// also gets an alias link at _layers/sha512/<x>/link whose content is the
// sha256 digest. Its reverse link is filed under blobs/sha512/<x>, so
// nothing records that the repository uses the sha256 blob behind it: GC and
// the reclaimer could delete that blob while the alias still serves it. So
// with the middleware configured, every request that would write a link
// under a digest other than sha256 is refused with 400 DIGEST_INVALID
// before Distribution sees it (docs/gc-protocol.md, "Digest algorithms"):
//
//	POST /v2/<name>/blobs/uploads/?digest=<d>        monolithic upload
//	POST /v2/<name>/blobs/uploads/?mount=<d>&from=.. cross-repository mount
//	PUT  /v2/<name>/blobs/uploads/<id>?digest=<d>    upload commit
//	PUT  /v2/<name>/manifests/<d>                    manifest push by digest
//
// Reads (GET, HEAD) by any digest create no link and are left to Distribution.
// Without the middleware, Distribution's behaviour is unchanged (Server.Handler
// adds this only with it).

// uploadPathRe is an upload's path; a manifest's is manifestRoute
// (referrers.go), the one pattern of a manifest URL.
var uploadPathRe = regexp.MustCompile(`^/v2/.+/blobs/uploads(/[^/]*)?$`)

func sha256Only(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkLinkDigest(r); err != nil {
			gcapi.WriteError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkLinkDigest returns gcapi.ErrDigestAlgorithm when r would create a link under
// a digest algorithm other than sha256. It reads parameters the way
// Distribution does (r.FormValue), so it sees the same value.
func checkLinkDigest(r *http.Request) error {
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		return nil
	}
	if uploadPathRe.MatchString(r.URL.Path) {
		params := []string{"digest"}
		if r.Method == http.MethodPost {
			params = append(params, "mount")
		}
		for _, p := range params {
			if err := checkAlgorithm(p, r.FormValue(p)); err != nil {
				return err
			}
		}
		return nil
	}
	if m := manifestRoute.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodPut {
		return checkAlgorithm("reference", m[2])
	}
	return nil
}

// checkAlgorithm refuses a digest string whose algorithm is not sha256. A
// value that is no digest at all (a tag, empty) passes: Distribution answers
// it as before.
func checkAlgorithm(param, value string) error {
	alg, _, ok := strings.Cut(value, ":")
	if !ok || digest.Algorithm(alg) == digest.SHA256 {
		return nil
	}
	return fmt.Errorf("%w: %s %q uses %s", gcapi.ErrDigestAlgorithm, param, value, alg)
}
