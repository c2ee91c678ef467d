package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certutil "k8s.io/client-go/util/cert"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// CertFiles are the certificate flags, named like kube-apiserver's.
type CertFiles struct {
	TLSCert, TLSKey                 string // --tls-cert-file, --tls-private-key-file
	ClientCA                        string // --client-ca-file
	RequestHeaderCA                 string // --requestheader-client-ca-file (optional)
	ProxyClientCert, ProxyClientKey string // --proxy-client-cert-file, --proxy-client-key-file
	PeerCA                          string // --peer-ca-file
}

// Validate reports every missing required file flag at once.
func (f CertFiles) Validate() []error {
	var errs []error
	for _, r := range []struct{ flag, value string }{
		{"--tls-cert-file", f.TLSCert}, {"--tls-private-key-file", f.TLSKey},
		{"--client-ca-file", f.ClientCA}, {"--proxy-client-cert-file", f.ProxyClientCert},
		{"--proxy-client-key-file", f.ProxyClientKey}, {"--peer-ca-file", f.PeerCA},
	} {
		if r.value == "" {
			errs = append(errs, fmt.Errorf("%s is required", r.flag))
		}
	}
	return errs
}

// Certs are the reloadable certificate sources.
type Certs struct {
	Serving         *dynamiccertificates.DynamicCertKeyPairContent
	ProxyClient     *dynamiccertificates.DynamicCertKeyPairContent
	ClientCA        *dynamiccertificates.DynamicFileCAContent
	PeerCA          *dynamiccertificates.DynamicFileCAContent
	RequestHeaderCA dynamiccertificates.CAContentProvider // nil: no peer is trusted
	AllClientCAs    dynamiccertificates.CAContentProvider
}

// LoadCerts reads every certificate file, failing with one error per flag
// at fault, and watches the files until ctx ends so rotations take effect
// (the library logs each reload).
func LoadCerts(ctx context.Context, f CertFiles) (*Certs, error) {
	if errs := f.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c := &Certs{}
	var errs []error
	var err error
	if c.Serving, err = dynamiccertificates.NewDynamicServingContentFromFiles("serving", f.TLSCert, f.TLSKey); err != nil {
		errs = append(errs, fmt.Errorf("--tls-cert-file/--tls-private-key-file: %w", err))
	}
	if c.ProxyClient, err = dynamiccertificates.NewDynamicServingContentFromFiles("proxy-client", f.ProxyClientCert, f.ProxyClientKey); err != nil {
		errs = append(errs, fmt.Errorf("--proxy-client-cert-file/--proxy-client-key-file: %w", err))
	}
	if c.ClientCA, err = dynamiccertificates.NewDynamicCAContentFromFile("client-ca", f.ClientCA); err != nil {
		errs = append(errs, fmt.Errorf("--client-ca-file: %w", err))
	}
	if c.PeerCA, err = dynamiccertificates.NewDynamicCAContentFromFile("peer-ca", f.PeerCA); err != nil {
		errs = append(errs, fmt.Errorf("--peer-ca-file: %w", err))
	}
	var rh *dynamiccertificates.DynamicFileCAContent
	if f.RequestHeaderCA != "" {
		if rh, err = dynamiccertificates.NewDynamicCAContentFromFile("requestheader-client-ca", f.RequestHeaderCA); err != nil {
			errs = append(errs, fmt.Errorf("--requestheader-client-ca-file: %w", err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c.AllClientCAs = c.ClientCA
	reloaders := []interface{ Run(context.Context, int) }{c.Serving, c.ProxyClient, c.ClientCA, c.PeerCA}
	if rh != nil {
		c.RequestHeaderCA = rh
		c.AllClientCAs = dynamiccertificates.NewUnionCAContentProvider(c.ClientCA, rh)
		reloaders = append(reloaders, rh)
	}
	for _, r := range reloaders {
		go r.Run(ctx, 1)
	}
	return c, nil
}

var certExpiryDesc = prometheus.NewDesc("skewgate_certificate_expiry_timestamp_seconds",
	"When the earliest certificate of each file skewgate uses expires (Unix seconds): serving, proxy_client, client_ca, peer_ca, requestheader_ca.",
	[]string{"certificate"}, nil)

// Describe implements prometheus.Collector: the expiry of every
// certificate file, read at scrape time, so a rotation shows at once.
func (c *Certs) Describe(ch chan<- *prometheus.Desc) { ch <- certExpiryDesc }

// Collect implements prometheus.Collector.
func (c *Certs) Collect(ch chan<- prometheus.Metric) {
	servingPEM, _ := c.Serving.CurrentCertKeyContent()
	clientPEM, _ := c.ProxyClient.CurrentCertKeyContent()
	files := map[string][]byte{"serving": servingPEM, "proxy_client": clientPEM,
		"client_ca": c.ClientCA.CurrentCABundleContent(), "peer_ca": c.PeerCA.CurrentCABundleContent()}
	if c.RequestHeaderCA != nil {
		files["requestheader_ca"] = c.RequestHeaderCA.CurrentCABundleContent()
	}
	for name, pemBytes := range files {
		if t, ok := earliestExpiry(pemBytes); ok {
			ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, float64(t.Unix()), name)
		}
	}
}

// earliestExpiry is the earliest NotAfter of the PEM certificates.
func earliestExpiry(pemBytes []byte) (time.Time, bool) {
	certs, err := certutil.ParseCertsPEM(pemBytes)
	if err != nil || len(certs) == 0 {
		return time.Time{}, false
	}
	t := certs[0].NotAfter
	for _, c := range certs[1:] {
		if c.NotAfter.Before(t) {
			t = c.NotAfter
		}
	}
	return t, true
}
