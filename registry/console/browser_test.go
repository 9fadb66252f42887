package console_test

import (
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// chromium finds the browser: $RECLAIM_CHROMIUM, else chromium on PATH
// (Debian's package installs /usr/bin/chromium). The browser tests skip
// only when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RECLAIM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium: install Debian's chromium package (apt-get install -y chromium) or set RECLAIM_CHROMIUM")
	return ""
}

// browser is one headless Chromium tab that sends the operator's
// credentials with every request, and fails the test if a page opens a
// JavaScript dialog (an injected alert would).
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string // where screenshots go
}

func newBrowser(t *testing.T, user, password string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // containers run tests as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelC := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelC(); cancelB(); cancelA() })
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": "Basic " + auth}}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// An injected alert() would open a dialog: fail, and dismiss it so the
	// page goes on.
	go func() {
		for d, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			t.Errorf("a page opened a JavaScript dialog: %q", d.Message)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return &browser{t: t, ctx: ctx, dir: artifactDir(t)}
}

// artifactDir is $RECLAIM_ARTIFACTS/console when set (CI keeps it), else a
// directory of the test's own.
func artifactDir(t *testing.T) string {
	dir := t.TempDir()
	if a := os.Getenv("RECLAIM_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "console")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("chromium: %v", err)
	}
}

// open loads url and waits for the page's main heading.
func (b *browser) open(url string) {
	b.t.Helper()
	b.run(chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("h1")))
}

// text is the rendered text of the first element sel matches, as a person
// sees it (innerText).
func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// sees fails the test unless the element sel shows every one of want.
func (b *browser) sees(sel string, want ...string) {
	b.t.Helper()
	got := b.text(sel)
	for _, w := range want {
		if !strings.Contains(got, w) {
			b.t.Errorf("%s does not show %q; it shows:\n%s", sel, w, got)
		}
	}
}

// count is how many elements sel matches.
func (b *browser) count(sel string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+quoteJS(sel)+`).length`))
	if err != nil {
		b.t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

func quoteJS(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}

// shoot saves a full-page PNG of the current page at desktop and at phone
// width, and logs where.
func (b *browser) shoot(name string) {
	b.t.Helper()
	for _, v := range []struct {
		suffix        string
		width, height int64
		mobile        bool
	}{{"desktop", 1280, 900, false}, {"phone", 390, 844, true}} {
		emu := chromedp.EmulateViewport(v.width, v.height)
		if v.mobile {
			emu = chromedp.EmulateViewport(v.width, v.height, chromedp.EmulateScale(2), chromedp.EmulateMobile)
		}
		b.run(emu)
		png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			b.t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(b.dir, name+"-"+v.suffix+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			b.t.Fatal(err)
		}
		b.t.Logf("screenshot: %s", p)
	}
	b.run(chromedp.EmulateViewport(1280, 900))
}
