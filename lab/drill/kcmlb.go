package drill

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/skewgate/skewgate/lab"
)

// The garbage collector's case: kubeadm points each controller-manager at
// its own node's apiserver, so its discovery and its reads of owners come
// from one server. Many installations point it at a load balancer (the
// VIP's, an L4 one), and kube-controller-manager opens more than one
// connection there: its REST mapper reads discovery with its own
// credentials, its controllers (--use-service-account-credentials,
// kubeadm's default) read with service-account tokens on another. An L4
// balancer sends them to different servers, so across versions the
// garbage collector can map an owner's type from a new server's discovery
// and ask an old one for the owner: a false 404, and the dependents go.

// kcmLBPort is the controller-managers' load balancer's port on the lab's
// bridge address.
const kcmLBPort = 7443

// kcmLBServerName is the name the controller-managers check the
// apiservers' certificates against through the balancer (kubeadm's
// apiserver certificate has no SAN for the balancer's address).
const kcmLBServerName = "kubernetes"

// tcpBalancer is an L4 load balancer in the lab's root namespace, as
// haproxy in `mode tcp` with `balance roundrobin` and a /readyz check:
// each accepted connection is spliced to the next node whose /readyz
// passes. Its connections to a node's address are a client's like any
// other: where skewgate steers, they reach the node's skewgate.
type tcpBalancer struct {
	ln    net.Listener
	nodes *balancer
	mu    sync.Mutex
	conns map[string]int // node address → connections sent there
	open  map[net.Conn]bool
	wg    sync.WaitGroup
}

// startTCPBalancer listens on the bridge address and balances over
// plane's nodes until close.
func startTCPBalancer(ctx context.Context, plane *lab.Plane, pc *http.Client) (*tcpBalancer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(lab.BridgeAddr.String(), fmt.Sprint(kcmLBPort)))
	if err != nil {
		return nil, fmt.Errorf("controller-managers' load balancer: %w", err)
	}
	b := &tcpBalancer{ln: ln, nodes: newBalancer(plane.Spec.Nodes), conns: map[string]int{}, open: map[net.Conn]bool{}}
	cctx, cancel := context.WithCancel(ctx)
	b.wg.Add(2)
	go func() { defer b.wg.Done(); b.nodes.check(cctx, pc) }()
	go func() { defer b.wg.Done(); defer cancel(); b.serve() }()
	return b, nil
}

// URL is the balancer's address as a kubeconfig names it.
func (b *tcpBalancer) URL() string { return "https://" + b.ln.Addr().String() }

func (b *tcpBalancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() { defer b.wg.Done(); b.splice(c) }()
	}
}

// splice copies between client c and the next healthy node until either
// side closes.
func (b *tcpBalancer) splice(c net.Conn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	s, err := b.nodes.dial(ctx, "tcp", "")
	cancel()
	if err != nil {
		return
	}
	defer s.Close()
	if !b.track(c, s) {
		return
	}
	defer b.untrack(c, s)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(s, c)
	go cp(c, s)
	<-done
	// One side ended: a server gone ends its clients' connections, as an
	// L4 balancer's would.
	c.Close()
	s.Close()
	<-done
}

// track records a spliced pair; false once the balancer closed.
func (b *tcpBalancer) track(c, s net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == nil {
		return false
	}
	b.conns[s.RemoteAddr().String()]++
	b.open[c], b.open[s] = true, true
	return true
}

func (b *tcpBalancer) untrack(c, s net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.open, c)
	delete(b.open, s)
}

// close stops accepting, ends every spliced connection and waits for
// every goroutine; it returns the connections sent to each node.
func (b *tcpBalancer) close() map[string]int {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.open {
		c.Close()
	}
	b.open = nil
	b.mu.Unlock()
	b.wg.Wait()
	return b.conns
}

// pointControllerManagers starts the balancer and points every
// controller-manager at it.
func pointControllerManagers(ctx context.Context, plane *lab.Plane, o Options) (*tcpBalancer, error) {
	pc, err := probeClient(plane.PKI)
	if err != nil {
		return nil, err
	}
	b, err := startTCPBalancer(ctx, plane, pc)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := plane.PointControllerManagers(ctx, b.URL(), kcmLBServerName, stepTimeout); err != nil {
		b.close()
		return nil, err
	}
	fmt.Fprintf(o.Progress, "drill:   controller-managers through %s in %s\n", b.URL(), time.Since(t0).Round(100*time.Millisecond))
	return b, nil
}

// byNodeName renames conns' node addresses by their nodes' names.
func byNodeName(conns map[string]int, nodes []lab.Node) map[string]int {
	name := map[string]string{}
	for _, n := range nodes {
		name[net.JoinHostPort(n.IP.String(), fmt.Sprint(lab.APIServerPort))] = n.Name
	}
	out := map[string]int{}
	for addr, c := range conns {
		if n, ok := name[addr]; ok {
			addr = n
		}
		out[addr] += c
	}
	return out
}

// connsText renders connections per node, by name.
func connsText(conns map[string]int) string {
	var parts []string
	for n, c := range conns {
		parts = append(parts, fmt.Sprintf("%s %d", n, c))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
