package linkdb

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

func TestExitCodePrecedence(t *testing.T) {
	for _, tc := range []struct {
		counts map[Kind]int64
		want   int
	}{
		{map[Kind]int64{}, ExitClean},
		{map[Kind]int64{Reclaimable: 9}, ExitClean},
		{map[Kind]int64{StaleReverse: 1}, ExitLeaks},
		{map[Kind]int64{StaleReferrer: 1, Reclaimable: 1}, ExitLeaks},
		{map[Kind]int64{Unreadable: 1, StaleReverse: 1}, ExitIncomplete},
		{map[Kind]int64{MissingReverse: 1, Unreadable: 1, StaleReverse: 1}, ExitDataLoss},
		{map[Kind]int64{BrokenForward: 1}, ExitDataLoss},
		{map[Kind]int64{Corrupt: 1}, ExitDataLoss},
		{map[Kind]int64{MissingReferrer: 1}, ExitDataLoss},
	} {
		if got := (&Report{Counts: tc.counts}).exitCode(); got != tc.want {
			t.Errorf("%v: exit %d, want %d", tc.counts, got, tc.want)
		}
	}
}

func TestReportText(t *testing.T) {
	r := &Report{
		Repositories: 2, ForwardLinks: 10, ReverseLinks: 9, Blobs: 8,
		Counts:              map[Kind]int64{MissingReverse: 1, Reclaimable: 2},
		ReclaimableComputed: true, ReclaimableBytes: 42,
		Findings: []Problem{
			{Kind: MissingReverse, Path: "/docker/registry/v2/repositories/a/_layers/sha256/ab/link", Digest: digest.FromString("x")},
			{Kind: Reclaimable, Path: "/docker/registry/v2/blobs/sha256/cd/cd00"},
		},
		ExitCode: ExitDataLoss,
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"10 forward links", "marker: absent", "missing_reverse   1", "(42 bytes)",
		"repositories/a/_layers/sha256/ab/link", "DATA-LOSS RISK", "exit 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "blobs/sha256/cd/cd00") {
		t.Errorf("reclaimable blobs are listed as findings to act on:\n%s", out)
	}
	js, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(js), `"missing_reverse":1`) || !strings.Contains(string(js), `"exit_code":2`) {
		t.Errorf("json %s %v", js, err)
	}
}

func TestParseBlobPath(t *testing.T) {
	d := digest.FromString("blob")
	dir := blobsDir + "/sha256/" + d.Encoded()[:2] + "/" + d.Encoded()
	for _, tc := range []struct {
		p    string
		ok   bool
		want blobPath
	}{
		{dir, true, blobPath{digest: d, dir: dir}},
		{dir + "/data", true, blobPath{digest: d, dir: dir, isData: true}},
		{dir + "/_repositories/team/app/_layers/link", true, blobPath{digest: d, dir: dir, reverse: true, repo: "team/app", kind: layersDir}},
		{dir + "/_repositories/app/_manifests/link", true, blobPath{digest: d, dir: dir, reverse: true, repo: "app", kind: manifestsDir}},
		{dir + "/_repositories/app", true, blobPath{digest: d, dir: dir}},
		{dir + "/_repositories/app/_other/link", true, blobPath{digest: d, dir: dir}},
		{blobsDir + "/sha256/zz/" + d.Encoded(), false, blobPath{}},
		{blobsDir + "/sha256/" + d.Encoded()[:2] + "/nothex", false, blobPath{}},
		{blobsDir + "/sha256/ab", false, blobPath{}},
		{"/elsewhere", false, blobPath{}},
	} {
		got, ok := parseBlobPath(tc.p)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v %v", tc.p, got, ok, tc.want, tc.ok)
		}
	}
}

func TestProgressLogLines(t *testing.T) {
	var b syncBuffer
	p := &Progress{Out: &b, LogEvery: 10 * time.Millisecond}
	p.begin("repositories", 10, 2)
	for range 4 {
		p.unit()
		p.link()
		time.Sleep(15 * time.Millisecond)
	}
	p.end()
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		t.Fatalf("want periodic lines, got %q", out)
	}
	last := lines[len(lines)-1]
	for _, want := range []string{"repositories: 6/10", "4 links", "links/s", "ETA "} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q lacks %q", last, want)
		}
	}
	if strings.Contains(out, "\r") {
		t.Error("carriage returns in log output")
	}

	var tty syncBuffer
	p = &Progress{Out: &tty, TTY: true}
	p.begin("blobs", 4, 0)
	p.unit()
	p.end()
	if !strings.HasPrefix(tty.String(), "\r") || !strings.Contains(tty.String(), "[=======") {
		t.Errorf("terminal bar: %q", tty.String())
	}
}

type syncBuffer struct {
	mu chanMutex
	b  bytes.Buffer
}

type chanMutex struct{ c chan struct{} }

func (m *chanMutex) lock() {
	if m.c == nil {
		m.c = make(chan struct{}, 1)
	}
	m.c <- struct{}{}
}
func (m *chanMutex) unlock() { <-m.c }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.lock()
	defer s.mu.unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.lock()
	defer s.mu.unlock()
	return s.b.String()
}
