package membership

import (
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/proxy/forward"
)

// ApiserverServiceName is the name every kube-apiserver's serving
// certificate carries (forward.APIServerName, which every peer's
// certificate must name for requests routed to it too).
const ApiserverServiceName = forward.APIServerName

// PeerConfigs is rc (the node's credentials toward its own apiserver)
// toward every healthy peer among members, for skewgate's own requests
// when the local apiserver does not answer. Each must prove itself an
// apiserver of this cluster before a token is sent to it: its serving
// certificate, verified by rc's CA, must name kubernetes.default.svc
// (every kube-apiserver's does; a kubelet's, also signed by the cluster
// CA, never does); and only healthy peers are listed, which have passed
// forward's whole apiserver check (no node certificate either) in every
// handshake of their probes. Without certificate verification (rc
// insecure) there are none.
func PeerConfigs(rc *rest.Config, members []Status) []*rest.Config {
	if rc == nil || rc.Insecure {
		return nil
	}
	var out []*rest.Config
	for _, st := range members {
		if st.Local || !st.Healthy || st.Departed != nil {
			continue
		}
		c := rest.CopyConfig(rc)
		c.Host = st.URL
		c.TLSClientConfig.ServerName = ApiserverServiceName
		out = append(out, c)
	}
	return out
}
