package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisProc is one redis-server (or sentinel) process a fixture started.
// It is stopped by its own PID, never by name.
type redisProc struct {
	Addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    syncBuffer
}

// startProc starts bin with args and waits (up to 10 s) until it answers
// PING on addr.
func startProc(bin, addr string, args ...string) (*redisProc, error) {
	p := &redisProc{Addr: addr, cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.After(10 * time.Second)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for c.Ping(context.Background()).Err() != nil {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s on %s exited: %s", bin, addr, p.log.String())
		case <-deadline:
			p.kill()
			return nil, fmt.Errorf("%s on %s did not answer: %s", bin, addr, p.log.String())
		case <-poll.C:
		}
	}
	return p, nil
}

// kill SIGKILLs the process and waits for it to exit.
func (p *redisProc) kill() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused process dies too
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop ends the process with SIGTERM (SIGKILL after 10 s) and waits.
func (p *redisProc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

// alive reports whether the process still runs.
func (p *redisProc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// freePorts returns n distinct free loopback ports. They are free when
// returned; a server started right after takes them.
func freePorts(n int) ([]int, error) {
	out := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func loopback(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// waitFor polls cond every 50 ms until it returns nil or ctx ends; it
// returns cond's last error then. It waits only for external processes
// (a cluster forming, a failover).
func waitFor(ctx context.Context, cond func(context.Context) error) error {
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ctx.Err(), err)
		case <-poll.C:
		}
	}
}

// addrsOf is the addresses of the processes *procs, read under mu (a
// fixture appends to the list as its processes start).
func addrsOf(mu *sync.Mutex, procs *[]*redisProc) []string {
	mu.Lock()
	defer mu.Unlock()
	out := make([]string, len(*procs))
	for i, p := range *procs {
		out[i] = p.Addr
	}
	return out
}

// settle waits up to 30 s for a fixture just started to be ready (cond
// nil); what says what did not happen then.
func settle(what string, cond func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitFor(ctx, cond); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// infoField reads one field of INFO section from the server at addr.
func infoField(ctx context.Context, addr, section, field string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(s) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s: no %s in INFO %s", addr, field, section)
}

var errNoBinary = errors.New("redis-server or redis-cli is not on PATH")

// redisBinaries returns the paths of redis-server and redis-cli.
func redisBinaries() (server, cli string, err error) {
	server, err1 := exec.LookPath("redis-server")
	cli, err2 := exec.LookPath("redis-cli")
	if err1 != nil || err2 != nil {
		return "", "", errNoBinary
	}
	return server, cli, nil
}

// ClusterAvailable says whether StartCluster can run here (redis-server and
// redis-cli are installed), so a test can pick a cluster over one server.
func ClusterAvailable() bool {
	_, _, err := redisBinaries()
	return err == nil
}
