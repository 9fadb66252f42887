package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/trash"
)

// judgeTrash checks the trash after a soak run with it on: every entry's
// blob still has its data (nothing in the trash is ever missing data),
// and a restore of collected manifests makes them pull, every blob
// checked against its digest.
func judgeTrash(ctx context.Context, t *testing.T, c *cluster) {
	t.Helper()
	r := c.regs[0]
	var list struct {
		Entries []trashentry.Entry `json:"entries"`
		Total   int                `json:"total"`
	}
	if err := getJSON(ctx, r, "/gc/v1/trash?limit=1000", &list); err != nil {
		t.Fatalf("trash list: %v", err)
	}
	missing := 0
	for _, e := range list.Entries {
		if _, err := c.raw.Stat(ctx, layout.BlobDataPath(e.Digest)); err != nil {
			missing++
			t.Errorf("trash entry %s (%s %s %s) holds %s, whose data is gone: %v", e.ID, e.Kind, e.Repo, e.Tag, e.Digest, err)
		}
	}
	restored := 0
	for _, e := range list.Entries {
		if e.Kind != reclaim.KindManifest || restored == 5 {
			continue
		}
		var rep trash.RestoreReport
		if err := postJSON(ctx, r, "/gc/v1/trash/restore?repository="+e.Repo+"&digest="+e.Digest.String(), &rep); err != nil {
			t.Errorf("restore %s@%s: %v", e.Repo, e.Digest, err)
			continue
		}
		if rep.Restored == 0 {
			continue // restored already with another entry, or pushed again
		}
		if _, err := pullVerify(ctx, r, e.Repo, "@"+e.Digest.String()); err != nil {
			t.Errorf("restored %s@%s does not pull: %v (restore: %+v)", e.Repo, e.Digest, err, rep)
		}
		restored++
	}
	t.Logf("trash: %d entries (%d listed), %d with missing data, %d manifests restored and pulled", list.Total, len(list.Entries), missing, restored)
	if list.Total == 0 {
		t.Error("the trash is empty after a soak with it on: no collect removed anything?")
	}
}

func getJSON(ctx context.Context, r *registrytest.Registry, path string, v any) error {
	return callJSON(ctx, r, http.MethodGet, path, v)
}

func postJSON(ctx context.Context, r *registrytest.Registry, path string, v any) error {
	return callJSON(ctx, r, http.MethodPost, path, v)
}

// callJSON makes one GC API call and decodes its 200 answer into v.
func callJSON(ctx context.Context, r *registrytest.Registry, method, path string, v any) error {
	resp, err := send(ctx, r, method, path, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}
