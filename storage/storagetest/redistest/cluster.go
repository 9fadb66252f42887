package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a loopback Redis Cluster of 3 masters and 3 replicas (one
// replica per master), started from redis-server and created with
// `redis-cli --cluster create`. Every node is a process the fixture owns
// and stops by its PID. Nodes keep no data on disk (no AOF, no RDB): a
// killed master's data lives on only in its replica.
//
//	c := redistest.StartCluster(t)   // skips when redis-server is absent
//	client := c.Client(t)              // a *redis.ClusterClient on Addrs()
//	m, _ := c.MasterFor(ctx, key)      // the master serving key's slot
//	r, _ := c.ReplicaOf(ctx, m)
//	c.Kill(m)                          // SIGKILL: its replica takes over
//	c.WaitMaster(ctx, r)               // r is a master, cluster_state:ok
type Cluster struct {
	dir   string
	mu    sync.Mutex
	nodes []*redisProc
}

// ClusterNodeTimeout is the nodes' cluster-node-timeout: a master that
// does not answer for this long is failed over to its replica (the
// promotion itself takes about another second).
const ClusterNodeTimeout = 1500 * time.Millisecond

// StartCluster starts a cluster the test owns and stops it at cleanup.
// The test is skipped when redis-server or redis-cli is not installed.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	if _, _, err := redisBinaries(); err != nil {
		t.Skipf("this test needs a Redis Cluster: %v", err)
	}
	c, err := NewCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// NewCluster starts a cluster with no test attached (TestMain); the
// caller calls Stop.
func NewCluster() (*Cluster, error) {
	server, cli, err := redisBinaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "reclaim-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	if err := c.start(server, cli); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(server, cli string) error {
	ports, err := freePorts(12) // a client port and a bus port per node
	if err != nil {
		return err
	}
	for i := range 6 {
		port, bus := ports[2*i], ports[2*i+1]
		d := filepath.Join(c.dir, strconv.Itoa(port))
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
		p, err := startProc(server, loopback(port), "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--dir", d, "--save", "", "--appendonly", "no", "--loglevel", "warning",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10),
			"--cluster-replica-validity-factor", "0")
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.nodes = append(c.nodes, p)
		c.mu.Unlock()
	}
	args := append(c.Addrs(), "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.Command(cli, append([]string{"--cluster", "create"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	return settle("cluster did not form", c.formed)
}

// formed reports nil once every node says cluster_state:ok, knows all six
// nodes, and every replica's link to its master is up.
func (c *Cluster) formed(ctx context.Context) error {
	for _, a := range c.Addrs() {
		if err := clusterOK(ctx, a, 6); err != nil {
			return err
		}
		role, err := infoField(ctx, a, "replication", "role")
		if err != nil {
			return err
		}
		if role == "slave" {
			if up, _ := infoField(ctx, a, "replication", "master_link_status"); up != "up" {
				return fmt.Errorf("%s: master link %q", a, up)
			}
		}
	}
	return nil
}

// clusterOK is nil when the node at addr says cluster_state:ok and knows
// at least known nodes.
func clusterOK(ctx context.Context, addr string, known int) error {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer cl.Close()
	s, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	m := map[string]string{}
	for line := range strings.Lines(s) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	if m["cluster_state"] != "ok" {
		return fmt.Errorf("%s: cluster_state %q", addr, m["cluster_state"])
	}
	if n, _ := strconv.Atoi(m["cluster_known_nodes"]); n < known {
		return fmt.Errorf("%s: knows %d nodes", addr, n)
	}
	return nil
}

// Addrs returns every node's address (masters and replicas, as started).
func (c *Cluster) Addrs() []string { return addrsOf(&c.mu, &c.nodes) }

// Client returns a cluster client on Addrs, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { cl.Close() })
	return cl
}

// MasterFor returns the address of the master that serves key now, as
// the live nodes see it.
func (c *Cluster) MasterFor(ctx context.Context, key string) (string, error) {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.liveAddrs()})
	defer cl.Close()
	m, err := cl.MasterForKey(ctx, key)
	if err != nil {
		return "", err
	}
	return m.Options().Addr, nil
}

// ReplicaOf returns the address of a live replica of the master at addr.
func (c *Cluster) ReplicaOf(ctx context.Context, master string) (string, error) {
	for _, a := range c.liveAddrs() {
		if a == master {
			continue
		}
		host, _ := infoField(ctx, a, "replication", "master_host")
		port, _ := infoField(ctx, a, "replication", "master_port")
		if host+":"+port == master {
			return a, nil
		}
	}
	return "", fmt.Errorf("no live replica of %s", master)
}

// Kill SIGKILLs the node at addr (a master's replica then takes over
// after ClusterNodeTimeout). It stays dead.
func (c *Cluster) Kill(addr string) {
	if p := c.node(addr); p != nil {
		p.kill()
	}
}

// Pause stops the node at addr with SIGSTOP (it answers nobody, as in a
// network partition); Resume continues it.
func (c *Cluster) Pause(addr string) { c.signal(addr, syscall.SIGSTOP) }

// Resume continues a paused node.
func (c *Cluster) Resume(addr string) { c.signal(addr, syscall.SIGCONT) }

func (c *Cluster) signal(addr string, sig syscall.Signal) {
	if p := c.node(addr); p != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// WaitMaster waits until the node at addr is a master and every live
// node says cluster_state:ok (after a failover: the promotion is done).
func (c *Cluster) WaitMaster(ctx context.Context, addr string) error {
	return waitFor(ctx, func(ctx context.Context) error {
		role, err := infoField(ctx, addr, "replication", "role")
		if err != nil {
			return err
		}
		if role != "master" {
			return fmt.Errorf("%s is a %s", addr, role)
		}
		for _, a := range c.liveAddrs() {
			if err := clusterOK(ctx, a, 0); err != nil {
				return err
			}
		}
		return nil
	})
}

func (c *Cluster) node(addr string) *redisProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

func (c *Cluster) liveAddrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.nodes {
		if n.alive() {
			out = append(out, n.Addr)
		}
	}
	return out
}

// Stop ends every node (by PID) and removes the cluster's directory.
func (c *Cluster) Stop() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(n.kill) // no data to keep: SIGKILL is enough
	}
	wg.Wait()
	_ = os.RemoveAll(c.dir)
}
