package plan

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultAdminPort is the secure admin listener's port in deploy/kubernetes
// (--secure-admin-address=$(NODE_IP):16444).
const DefaultAdminPort = 16444

// Node is one control-plane node's skewgate as the plan reaches it.
type Node struct {
	// Address is the address its kube-apiserver advertises (invalid when
	// the admin URL was given and names no node address).
	Address netip.AddrPort
	// Admin is its admin listener's base URL.
	Admin string
}

// Name is how the node is shown: its advertise address, else its URL.
func (n Node) Name() string {
	if n.Address.IsValid() {
		return n.Address.Addr().String()
	}
	return n.Admin
}

// AdvertiseAddresses are the members of default/kubernetes: the address
// and port every kube-apiserver advertises, from its EndpointSlices.
func AdvertiseAddresses(ctx context.Context, c *Cluster) ([]netip.AddrPort, error) {
	slices_, err := c.Kube.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	if err != nil {
		return nil, fmt.Errorf("default/kubernetes endpoints: %w", err)
	}
	var out []netip.AddrPort
	for _, s := range slices_.Items {
		port := uint16(6443)
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil || *p.Name == "https") {
				port = uint16(*p.Port)
			}
		}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					out = append(out, netip.AddrPortFrom(ip, port))
				}
			}
		}
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return slices.Compact(out), nil
}

// Nodes are the admin listeners to read: urls if given (a URL whose host
// is an advertised address is that node), else https://<address>:<port>
// for every advertised address.
func Nodes(advertised []netip.AddrPort, urls []string, port int) []Node {
	if len(urls) == 0 {
		var out []Node
		for _, a := range advertised {
			out = append(out, Node{Address: a, Admin: "https://" + net.JoinHostPort(a.Addr().String(), strconv.Itoa(port))})
		}
		return out
	}
	var out []Node
	for _, u := range urls {
		n := Node{Admin: strings.TrimSuffix(u, "/")}
		host := strings.TrimPrefix(strings.TrimPrefix(n.Admin, "https://"), "http://")
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			for _, a := range advertised {
				if a.Addr() == ip {
					n.Address = a
				}
			}
		}
		out = append(out, n)
	}
	return out
}
