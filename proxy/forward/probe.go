package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"
)

// ErrNotProxy is a probe answered by the apiserver itself: steering lapsed.
var ErrNotProxy = errors.New("steered address answered without skewgate")

// HeaderProbe marks skewgate's own steering probe. skewgate answers it
// itself, for a caller with the front-proxy certificate: the probe asks
// whether new connections reach skewgate, which must not depend on the
// local apiserver's health — while it restarts skewgate serves its
// clients through peers, and steering must hold exactly then.
const HeaderProbe = "X-Skewgate-Probe"

// AnswerProbe answers a steering probe.
func AnswerProbe(w http.ResponseWriter) {
	w.Header().Set(HeaderRoute, "self")
	w.Header().Set(HeaderServer, "skewgate")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok"))
}

// ProxyProbe returns a check that a new connection to dial is answered by
// skewgate: dial is the steered address itself, or skewgate's listener.
// Either way the request is for the steered address, whose IP the serving
// certificate must carry.
func ProxyProbe(dial, steered netip.AddrPort, trust Trust, userAgent string) func(context.Context) error {
	u := &url.URL{Scheme: "https", Host: steered.String(), Path: "/healthz"}
	tr := newTransport(u, trust)
	dialer := &net.Dialer{Timeout: DialTimeout}
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, dial.String())
	}
	// The caller's context bounds a probe (steering gives it what its
	// lease has left); no shorter timeout of its own, so a slow answer
	// from a starved skewgate is not taken for a dead one.
	client := &http.Client{Transport: tr}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return err
		}
		// A fresh connection each time: only new connections are steered.
		req.Close = true
		req.Header.Set("User-Agent", userAgent)
		req.Header.Set(HeaderProbe, "steering")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.Header.Get(HeaderRoute) == "" {
			return ErrNotProxy
		}
		return nil
	}
}

// CheckReachable fails with one line when the apiserver at b cannot be
// reached within 5 s or does not present a certificate the peer CA trusts.
func CheckReachable(ctx context.Context, b *Backend) error {
	defer b.CloseIdle()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL.String()+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := b.Transport().RoundTrip(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("apiserver %s unreachable: %w", b.URL, err)
	}
	resp.Body.Close()
	return nil
}
