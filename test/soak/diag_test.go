package soak

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// diag is a log of collects and acknowledged PUTs, printed next to a LOST
// DATA report: which collect removed what, and when.
var diag struct {
	mu     sync.Mutex
	events []string
}

func diagf(format string, args ...any) {
	diag.mu.Lock()
	defer diag.mu.Unlock()
	diag.events = append(diag.events, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// diagAbout lists the events that mention any of words.
func diagAbout(words ...string) string {
	diag.mu.Lock()
	defer diag.mu.Unlock()
	var b strings.Builder
	for _, e := range diag.events {
		for _, w := range words {
			if w != "" && strings.Contains(e, w) {
				b.WriteString("\n    " + e)
				break
			}
		}
	}
	return b.String()
}

func (ri *rawImage) blobDigests() []string {
	var out []string
	for _, b := range ri.blobs {
		out = append(out, b.d.String())
	}
	return out
}

// lostDigest is the sha256 digest an error names, if any.
func lostDigest(err error) string {
	s := err.Error()
	i := strings.Index(s, "sha256:")
	if i < 0 || len(s) < i+71 {
		return ""
	}
	return s[i : i+71]
}
