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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	log   []lbConn
	lead  []leader
	open  map[net.Conn]bool
	wg    sync.WaitGroup
}

// lbConn is one connection the balancer spliced: from a client address
// to a node address, while.
type lbConn struct {
	from, to   string
	start, end time.Time
}

// leader is who held the controller-managers' lease from at.
type leader struct {
	at     time.Time
	holder string
}

// KCMBalancer is what the controller-managers' load balancer saw: every
// connection, by node name (a controller-manager connects from its
// node's address), and who led them when.
type KCMBalancer struct {
	Conns   []KCMConn
	Leaders []KCMLeader
}

// KCMConn is one controller-manager connection: from node From's
// controller-manager to node To's apiserver, from Start to End (zero:
// open at the end).
type KCMConn struct {
	From, To   string
	Start, End time.Time
}

// KCMLeader is the node whose controller-manager held the leader lease
// from At.
type KCMLeader struct {
	At   time.Time
	Node string
}

// startTCPBalancer listens on the bridge address and balances over
// plane's nodes until close.
func startTCPBalancer(ctx context.Context, plane *lab.Plane, pc *http.Client) (*tcpBalancer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(lab.BridgeAddr.String(), fmt.Sprint(kcmLBPort)))
	if err != nil {
		return nil, fmt.Errorf("controller-managers' load balancer: %w", err)
	}
	b := &tcpBalancer{ln: ln, nodes: newBalancer(plane.Spec.Nodes), open: map[net.Conn]bool{}}
	cctx, cancel := context.WithCancel(ctx)
	b.wg.Add(3)
	go func() { defer b.wg.Done(); b.nodes.check(cctx, pc) }()
	go func() { defer b.wg.Done(); b.leaders(cctx, plane) }()
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
	i, ok := b.track(c, s)
	if !ok {
		return
	}
	defer b.untrack(c, s, i)
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

// track records a spliced pair and returns its log index; false once the
// balancer closed.
func (b *tcpBalancer) track(c, s net.Conn) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == nil {
		return 0, false
	}
	from, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	b.log = append(b.log, lbConn{from: from, to: s.RemoteAddr().String(), start: time.Now()})
	b.open[c], b.open[s] = true, true
	return len(b.log) - 1, true
}

func (b *tcpBalancer) untrack(c, s net.Conn, i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == nil {
		return // closed by close: open at the end
	}
	b.log[i].end = time.Now()
	delete(b.open, c)
	delete(b.open, s)
}

// leaders polls the controller-managers' leader lease every second,
// recording each change of holder ("node-a_<uid>": the node's name).
func (b *tcpBalancer) leaders(ctx context.Context, plane *lab.Plane) {
	c, err := plane.AdminClient(plane.Spec.Nodes[len(plane.Spec.Nodes)-1])
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		l, err := c.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			holder, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
			b.mu.Lock()
			if n := len(b.lead); n == 0 || b.lead[n-1].holder != holder {
				b.lead = append(b.lead, leader{time.Now(), holder})
			}
			b.mu.Unlock()
		}
		sleep(ctx, time.Second)
	}
}

// close stops accepting, ends every spliced connection and waits for
// every goroutine; it returns what the balancer saw, by node name.
func (b *tcpBalancer) close(nodes []lab.Node) *KCMBalancer {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.open {
		c.Close()
	}
	b.open = nil
	b.mu.Unlock()
	b.wg.Wait()
	name := map[string]string{}
	for _, n := range nodes {
		name[n.IP.String()] = n.Name
		name[net.JoinHostPort(n.IP.String(), fmt.Sprint(lab.APIServerPort))] = n.Name
	}
	nameOf := func(addr string) string {
		if n, ok := name[addr]; ok {
			return n
		}
		return addr
	}
	out := &KCMBalancer{}
	for _, c := range b.log {
		out.Conns = append(out.Conns, KCMConn{From: nameOf(c.from), To: nameOf(c.to), Start: c.start, End: c.end})
	}
	for _, l := range b.lead {
		out.Leaders = append(out.Leaders, KCMLeader{At: l.at, Node: l.holder})
	}
	return out
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
		b.close(plane.Spec.Nodes)
		return nil, err
	}
	fmt.Fprintf(o.Progress, "drill:   controller-managers through %s in %s\n", b.URL(), time.Since(t0).Round(100*time.Millisecond))
	return b, nil
}

// PerNode counts the connections to each node.
func (k *KCMBalancer) PerNode() map[string]int {
	out := map[string]int{}
	for _, c := range k.Conns {
		out[c.To]++
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

// timeline renders, relative to t0, who led the controller-managers and
// every connection of each node's controller-manager: "node-a: →node-b
// −40s…+95s, →node-c +96s…".
func (k *KCMBalancer) timeline(t0 time.Time) []string {
	rel := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := t.Sub(t0).Round(time.Second)
		if d < 0 {
			return "−" + (-d).String()
		}
		return "+" + d.String()
	}
	var leads []string
	for _, l := range k.Leaders {
		leads = append(leads, l.Node+" "+rel(l.At))
	}
	out := []string{"leader: " + strings.Join(leads, ", ")}
	by := map[string][]string{}
	var froms []string
	for _, c := range k.Conns {
		if by[c.From] == nil {
			froms = append(froms, c.From)
		}
		by[c.From] = append(by[c.From], "→"+c.To+" "+rel(c.Start)+"…"+rel(c.End))
	}
	sort.Strings(froms)
	for _, f := range froms {
		out = append(out, f+"'s: "+strings.Join(by[f], ", "))
	}
	return out
}
