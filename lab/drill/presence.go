package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// grace is how long a server that left still counts as serving what it
// served: skewgate's departure grace, and the definition of a false 404.
const grace = 5 * time.Minute

// presence knows which kube-apiserver versions serve the plane at a time:
// the live ones, and those that left within the grace window.
type presence struct {
	mu       sync.Mutex
	live     map[string]string // node → version
	departed []departure
	silent   []nodeEvent                                     // when a node's apiserver stopped answering
	ups      []nodeEvent                                     // when a node's apiserver was (back) up
	catalog  map[string]map[schema.GroupVersionResource]bool // version → what it serves
}

type departure struct {
	node, version string
	at            time.Time
}

func newPresence() *presence {
	return &presence{live: map[string]string{}, catalog: map[string]map[schema.GroupVersionResource]bool{}}
}

func (p *presence) up(node, version string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live[node] = version
	p.ups = append(p.ups, nodeEvent{node: node, at: time.Now()})
}

func (p *presence) down(node string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.live[node]; ok {
		p.departed = append(p.departed, departure{node, v, at})
		delete(p.live, node)
	}
}

// served reports whether a version live now serves gvr (an empty
// resource: the group/version), and whether one that left within the
// grace did.
func (p *presence) served(gvr schema.GroupVersionResource) (live, inGrace bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range p.live {
		live = live || p.catalog[v][gvr]
	}
	for _, d := range p.departed {
		if time.Since(d.at) < grace {
			inGrace = inGrace || p.catalog[d.version][gvr]
		}
	}
	return live, inGrace
}

// stoppedAnswering records that node's apiserver stopped answering at
// at (refused or timed out, where it had answered, even with a failure).
func (p *presence) stoppedAnswering(node string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.silent = append(p.silent, nodeEvent{node: node, at: at})
}

// history returns when each node's apiserver went away, stopped
// answering and was up, in order.
func (p *presence) history() (stops, silent, ups []nodeEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	stops = make([]nodeEvent, len(p.departed))
	for i, d := range p.departed {
		stops[i] = nodeEvent{node: d.node, at: d.at}
	}
	return stops, slices.Clone(p.silent), slices.Clone(p.ups)
}

// servedAtAll reports whether a live server, or one within the grace,
// serves gvr.
func (p *presence) servedAtAll(gvr schema.GroupVersionResource) bool {
	live, inGrace := p.served(gvr)
	return live || inGrace
}

// learn reads what version serves from its server's own (nopeer)
// aggregated discovery, once per version.
func (p *presence) learn(ctx context.Context, c *http.Client, baseURL, version string) error {
	p.mu.Lock()
	_, known := p.catalog[version]
	p.mu.Unlock()
	if known {
		return nil
	}
	cat := map[schema.GroupVersionResource]bool{}
	for _, path := range []string{"/api", "/apis"} {
		list, err := aggregated(ctx, c, baseURL+path)
		if err != nil {
			return fmt.Errorf("discovery of %s: %w", version, err)
		}
		for _, g := range list.Items {
			for _, v := range g.Versions {
				gv := schema.GroupVersion{Group: g.Name, Version: v.Version}
				cat[gv.WithResource("")] = true
				for _, r := range v.Resources {
					cat[gv.WithResource(r.Resource)] = true
				}
			}
		}
	}
	p.mu.Lock()
	p.catalog[version] = cat
	p.mu.Unlock()
	return nil
}

// onlyIn lists what a serves and b does not.
func (p *presence) onlyIn(a, b string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for gvr := range p.catalog[a] {
		if gvr.Resource != "" && !p.catalog[b][gvr] {
			out = append(out, gvr.GroupVersion().String()+"/"+gvr.Resource)
		}
	}
	return out
}

func aggregated(ctx context.Context, c *http.Client, url string) (*apidiscoveryv2.APIGroupDiscoveryList, error) {
	body, err := get(ctx, c, url, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer")
	if err != nil {
		return nil, err
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	return &list, json.Unmarshal(body, &list)
}

// get reads url's body; any answer but 200 is an error with the body.
func get(ctx context.Context, c *http.Client, url, accept string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return body, nil
}
