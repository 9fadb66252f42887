package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a loopback Redis with Sentinel: one master, one replica and
// three sentinels (quorum 2), all processes the fixture owns and stops by
// PID. Nothing is kept on disk: a killed master's data lives on only in
// its replica.
//
//	s := redistest.StartSentinel(t)  // skips when redis-server is absent
//	client := s.Client(t)              // a go-redis failover client
//	m, _ := s.Master(ctx)              // the master the sentinels name
//	s.Kill(m)                          // SIGKILL: the sentinels promote the replica
//	s.WaitMaster(ctx, s.Replica())     // the sentinels name the replica
type Sentinel struct {
	dir       string
	mu        sync.Mutex
	master    *redisProc
	replica   *redisProc
	sentinels []*redisProc
}

// SentinelMasterName is the name the sentinels monitor the master under.
const SentinelMasterName = "reclaim"

// SentinelDownAfter is the sentinels' down-after-milliseconds: a master
// silent for this long is failed over.
const SentinelDownAfter = time.Second

// StartSentinel starts the servers and sentinels and stops them at
// cleanup. The test is skipped when redis-server is not installed.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	server, _, err := redisBinaries()
	if err != nil {
		t.Skipf("this test needs Redis Sentinel: %v", err)
	}
	dir := t.TempDir()
	s := &Sentinel{dir: dir}
	t.Cleanup(s.Stop)
	if err := s.start(server); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *Sentinel) start(server string) error {
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	data := func(p int) []string {
		return []string{"--port", strconv.Itoa(p), "--bind", "127.0.0.1", "--dir", s.dir,
			"--dbfilename", strconv.Itoa(p) + ".rdb", "--save", "", "--appendonly", "no", "--loglevel", "warning"}
	}
	if s.master, err = startProc(server, loopback(ports[0]), data(ports[0])...); err != nil {
		return err
	}
	if s.replica, err = startProc(server, loopback(ports[1]), append(data(ports[1]), "--replicaof", "127.0.0.1", strconv.Itoa(ports[0]))...); err != nil {
		return err
	}
	for _, p := range ports[2:] {
		conf := filepath.Join(s.dir, "sentinel-"+strconv.Itoa(p)+".conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 10000\nsentinel parallel-syncs %s 1\n",
			p, s.dir, SentinelMasterName, ports[0], SentinelMasterName, SentinelDownAfter.Milliseconds(), SentinelMasterName, SentinelMasterName)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return err
		}
		sp, err := startProc(server, loopback(p), conf, "--sentinel", "--loglevel", "warning")
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.sentinels = append(s.sentinels, sp)
		s.mu.Unlock()
	}
	return settle("sentinels not ready", s.ready)
}

// ready is nil once every sentinel knows the replica and the two other
// sentinels (so a failover can be agreed), and the replica is in sync.
func (s *Sentinel) ready(ctx context.Context) error {
	for _, a := range s.Addrs() {
		m, err := askSentinel(ctx, a, (*redis.SentinelClient).Master)
		if err != nil {
			return err
		}
		if m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
			return fmt.Errorf("sentinel %s: %s replicas, %s other sentinels", a, m["num-slaves"], m["num-other-sentinels"])
		}
	}
	if up, _ := infoField(ctx, s.replica.Addr, "replication", "master_link_status"); up != "up" {
		return fmt.Errorf("replica link %q", up)
	}
	return nil
}

// Addrs returns the sentinels' addresses.
func (s *Sentinel) Addrs() []string { return addrsOf(&s.mu, &s.sentinels) }

// Replica returns the address of the server started as the replica.
func (s *Sentinel) Replica() string { return s.replica.Addr }

// Master returns the master's address as the first sentinel that answers
// names it.
func (s *Sentinel) Master(ctx context.Context) (string, error) {
	var last error
	for _, a := range s.Addrs() {
		addr, err := askSentinel(ctx, a, (*redis.SentinelClient).GetMasterAddrByName)
		if err == nil && len(addr) == 2 {
			return addr[0] + ":" + addr[1], nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel names the master: %v", last)
}

// Client returns a failover client (what `mastername` plus the sentinels'
// addresses configure), closed when the test ends.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMasterName, SentinelAddrs: s.Addrs()})
	t.Cleanup(func() { c.Close() })
	return c
}

// Kill SIGKILLs the server (master or replica) at addr; it stays dead.
func (s *Sentinel) Kill(addr string) {
	for _, p := range []*redisProc{s.master, s.replica} {
		if p.Addr == addr {
			p.kill()
		}
	}
}

// WaitMaster waits until every sentinel names addr as the master and addr
// says it is one.
func (s *Sentinel) WaitMaster(ctx context.Context, addr string) error {
	return waitFor(ctx, func(ctx context.Context) error {
		for _, a := range s.Addrs() {
			m, err := askSentinel(ctx, a, (*redis.SentinelClient).GetMasterAddrByName)
			if err != nil {
				return err
			}
			if len(m) != 2 || m[0]+":"+m[1] != addr {
				return fmt.Errorf("sentinel %s names %v", a, m)
			}
		}
		role, err := infoField(ctx, addr, "replication", "role")
		if err == nil && role != "master" {
			err = fmt.Errorf("%s is a %s", addr, role)
		}
		return err
	})
}

// Stop ends every process by PID.
func (s *Sentinel) Stop() {
	s.mu.Lock()
	procs := append([]*redisProc{s.master, s.replica}, s.sentinels...)
	s.sentinels = nil
	s.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
}

// askSentinel asks the sentinel at addr about the master (ask is one of
// the client's methods on a master's name) on a connection of its own.
func askSentinel[T any, C interface{ Result() (T, error) }](ctx context.Context, addr string,
	ask func(*redis.SentinelClient, context.Context, string) C) (T, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	return ask(c, ctx, SentinelMasterName).Result()
}
