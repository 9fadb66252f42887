package registrytest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v2"
)

// binaryEnv names a prebuilt registry binary to use instead of building one.
// Build it with -tags reclaim_testhooks, as Binary does: the test of
// interrupted runs halts a collection through a hook (registry/gchalt.go)
// that release builds leave out.
const binaryEnv = "RECLAIM_TEST_REGISTRY_BINARY"

// testHooksTag is the build tag of the test hooks a test registry binary
// carries.
const testHooksTag = "reclaim_testhooks"

const readyTimeout = 30 * time.Second

var (
	mainCalled bool

	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
)

// Main runs the tests of a package that uses StartProcess and then removes
// the registry binary built for them. Call it from TestMain:
//
//	func TestMain(m *testing.M) { registrytest.Main(m) }
func Main(m *testing.M) {
	mainCalled = true
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// Binary returns the path of the registry binary: $RECLAIM_TEST_REGISTRY_BINARY
// if set, otherwise ./cmd/registry built once per test binary, with the
// test hooks (-tags reclaim_testhooks).
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(binaryEnv); p != "" {
		return p
	}
	if !mainCalled {
		t.Fatal("registrytest: StartProcess needs `func TestMain(m *testing.M) { registrytest.Main(m) }` in the package (it removes the built binary)")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "registrytest-bin-")
		if buildErr != nil {
			return
		}
		buildPath = filepath.Join(buildDir, "registry")
		// The test's working directory is inside the module, so the import
		// path resolves to this checkout's cmd/registry.
		cmd := exec.Command("go", "build", "-tags", testHooksTag, "-o", buildPath, "github.com/reclaim-registry/reclaim/cmd/registry")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/registry: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("registrytest: %v", buildErr)
	}
	return buildPath
}

// Process is a registry running as a `registry serve <config>` child process.
// Its storage outlives the process, so Kill followed by Restart is a crash
// and recovery, and two Processes given the same WithRootDirectory are two
// instances of one deployment.
type Process struct {
	*Registry
	// ConfigPath is the config file the process was started with.
	ConfigPath string
	// DebugURL is the debug server's base URL (Prometheus at /metrics).
	DebugURL string
	// LogPath is the file that collects the process's stdout and stderr,
	// across restarts.
	LogPath string

	bin string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartProcess builds the registry binary (once per test binary), writes a
// config file for opts with the registry and its debug server on free
// loopback ports, starts `registry serve`, and waits until /v2/ answers.
// t.Cleanup kills it; when the test failed, the log is attached to the test
// output.
func StartProcess(t testing.TB, opts ...Option) *Process {
	t.Helper()
	bin := Binary(t)
	s := newSettings(t, opts)
	dir := t.TempDir()
	p := &Process{
		ConfigPath: filepath.Join(dir, "config.yml"),
		LogPath:    filepath.Join(dir, "registry.log"),
		bin:        bin,
	}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() && p.Registry != nil {
			t.Logf("registrytest: log of registry process %s:\n%s", p.URL, p.Logs())
		}
	})

	// A port picked here can be taken by someone else before the child binds
	// it; that shows up as an early exit, and we try again with new ports.
	var lastErr error
	for range 3 {
		addr, debugAddr := freeAddr(t), freeAddr(t)
		cfg := s.config(t)
		cfg.HTTP.Addr = addr
		cfg.HTTP.Debug.Addr = debugAddr
		cfg.HTTP.Debug.Prometheus.Enabled = true
		cfg.HTTP.Debug.Prometheus.Path = "/metrics"
		raw, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("registrytest: marshal config: %v", err)
		}
		if err := os.WriteFile(p.ConfigPath, raw, 0o600); err != nil {
			t.Fatalf("registrytest: %v", err)
		}
		p.Registry = newRegistry("http://"+addr, s, cfg)
		p.DebugURL = "http://" + debugAddr
		if lastErr = p.start(t); lastErr == nil {
			return p
		}
	}
	t.Fatalf("registrytest: start registry process: %v\n%s", lastErr, p.Logs())
	return nil
}

// PID is the process id of the running registry (0 if it is not running).
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Cmd is the running registry's command; it changes on Restart.
func (p *Process) Cmd() *exec.Cmd {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd
}

// Kill SIGKILLs the registry, as a crash would, and waits for it to exit.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	p.kill()
}

// Stop asks the registry to shut down with SIGTERM and waits for it to exit,
// SIGKILLing it if it takes longer than 10 seconds.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	cmd, done := p.running()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("registrytest: registry %s did not stop within 10s of SIGTERM; killing it", p.URL)
		p.kill()
	}
}

// Restart starts the registry again with the same config file (same ports,
// same storage) after Kill or Stop, and waits until it serves. A registry
// still running is stopped first.
func (p *Process) Restart(t testing.TB) {
	t.Helper()
	p.Stop(t)
	if err := p.start(t); err != nil {
		t.Fatalf("registrytest: restart registry process: %v\n%s", err, p.Logs())
	}
}

// Logs returns everything the process (and its earlier incarnations) wrote.
func (p *Process) Logs() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

func (p *Process) running() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil, nil
	}
	select {
	case <-p.done:
		return nil, nil
	default:
		return p.cmd, p.done
	}
}

func (p *Process) kill() {
	cmd, done := p.running()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// start runs the binary on the current config file and waits for /v2/.
func (p *Process) start(t testing.TB) error {
	t.Helper()
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, "serve", p.ConfigPath)
	cmd.Env = ChildEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return waitReady(t, p.URL, done)
}

// ChildEnv is the test's environment without REGISTRY_* variables, which
// Distribution reads as config overrides: the config file is the whole
// truth for a registry process a test starts.
func ChildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REGISTRY_") {
			env = append(env, kv)
		}
	}
	return env
}

var errExited = errors.New("registry process exited before it served /v2/")

func waitReady(t testing.TB, url string, exited <-chan struct{}) error {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errExited
		default:
		}
		resp, err := client.Get(url + "/v2/")
		if err == nil {
			resp.Body.Close()
			// 401 is ready too: the registry is serving, it wants credentials.
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("registry at %s did not serve /v2/ within %s", url, readyTimeout)
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("registrytest: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
