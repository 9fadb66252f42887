package redistest

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server one test owns: its own loopback port and
// data directory, append-only file on (fsync always) unless Ephemeral, so
// the test can restart it with its data (a new run_id), kill it, flush it,
// or set maxmemory-policy without touching the Redis other tests share.
type RedisServer struct {
	// Addr is "127.0.0.1:<port>".
	Addr string

	bin, dir  string
	port      int
	ephemeral bool
	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	log       syncBuffer
}

// syncBuffer collects the server's output, written by exec's copier.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// RedisOption configures StartRedisServer.
type RedisOption func(*RedisServer)

// Ephemeral runs the server without persistence: Kill loses every key.
func Ephemeral() RedisOption { return func(s *RedisServer) { s.ephemeral = true } }

// StartRedisServer starts a redis-server from PATH, and stops it when the
// test ends. The test is skipped when redis-server is not installed.
func StartRedisServer(t testing.TB, opts ...RedisOption) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("this test needs redis-server on PATH (it restarts and reconfigures a private one)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), bin: bin, dir: t.TempDir(), port: port}
	for _, o := range opts {
		o(s)
	}
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

func (s *RedisServer) start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	persist := []string{"--appendonly", "yes", "--appendfsync", "always"}
	if s.ephemeral {
		persist = []string{"--appendonly", "no"}
	}
	s.cmd = exec.Command(s.bin, append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--loglevel", "warning"}, persist...)...)
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	if err := s.cmd.Start(); err != nil {
		s.mu.Unlock()
		t.Fatalf("start redis-server: %v", err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func(c *exec.Cmd) { _ = c.Wait(); close(exited) }(s.cmd)
	s.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.After(10 * time.Second)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		// PING fails while the server loads its data (LOADING).
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("redis-server on %s exited: %s", s.Addr, s.log.String())
		case <-deadline:
			t.Fatalf("redis-server on %s did not answer: %s", s.Addr, s.log.String())
		case <-poll.C:
		}
	}
}

// stop shuts the server down cleanly (SIGTERM: the append-only file is
// complete) and waits for it to exit.
func (s *RedisServer) stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Kill SIGKILLs the server and waits for it to exit; Start brings it back.
func (s *RedisServer) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Start starts a stopped or killed server again on the same port and data
// directory.
func (s *RedisServer) Start(t testing.TB) { s.start(t) }

// Restart stops the server cleanly and starts it again on the same port
// with the same data directory: the data survives, the run_id changes.
// Clients keep their pools; go-redis reconnects without an error.
func (s *RedisServer) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	s.start(t)
}

// Client returns a client of the server, closed when the test ends.
func (s *RedisServer) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}
