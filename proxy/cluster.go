package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultServiceAccountDir is where a pod finds its ServiceAccount's token
// and the cluster CA (rest.InClusterConfig's files).
const DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// clusterSource says where skewgate's cluster credentials come from, for
// errors and logs.
type clusterSource string

// clusterConfig is how skewgate reads the cluster: cfg.Kubeconfig when set;
// otherwise, when saDir holds a ServiceAccount's token and ca.crt (a pod),
// that token and CA toward the local apiserver, verified by the local
// server name. Not the kubernetes Service: a control-plane node being
// upgraded may have no kube-proxy, and the Service's endpoints may be
// steered back into skewgate. It returns a nil config when there is
// neither, and an error when a file is there but unusable.
func clusterConfig(cfg Config, local *url.URL, saDir string) (*rest.Config, clusterSource, error) {
	if cfg.Kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return nil, "", fmt.Errorf("--kubeconfig: %w", err)
		}
		return rc, clusterSource("--kubeconfig " + cfg.Kubeconfig), nil
	}
	token, ca := filepath.Join(saDir, corev1.ServiceAccountTokenKey), filepath.Join(saDir, corev1.ServiceAccountRootCAKey)
	if _, err := os.Stat(token); errors.Is(err, os.ErrNotExist) {
		return nil, "", nil
	}
	for _, f := range []string{token, ca} {
		if _, err := os.ReadFile(f); err != nil {
			return nil, "", fmt.Errorf("service account: %w", err)
		}
	}
	// BearerTokenFile: client-go re-reads the projected token, which the
	// kubelet rotates.
	rc := &rest.Config{Host: local.String(), BearerTokenFile: token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: ca, ServerName: localServerName(cfg.LocalServerName, local)}}
	return rc, clusterSource("service account token " + token + " toward " + local.String()), nil
}

// ClusterConfig is the rest.Config skewgate reads the cluster with (see
// clusterConfig), as its user agent; nil without cluster credentials. The
// admin listener delegates authentication and authorization with it.
func (p *Proxy) ClusterConfig() (*rest.Config, error) {
	rc, _, err := clusterConfig(p.cfg, p.local, p.cfg.serviceAccountDir())
	if rc != nil {
		rc = rest.CopyConfig(rc)
		rc.UserAgent = p.cfg.UserAgent
	}
	return rc, err
}

// clusterClient is a client for rc, as userAgent.
func clusterClient(rc *rest.Config, userAgent string) (kubernetes.Interface, error) {
	rc = rest.CopyConfig(rc)
	rc.UserAgent = userAgent
	return kubernetes.NewForConfig(rc)
}

// watchHeaderNames follows kube-system/extension-apiserver-authentication,
// where every kube-apiserver publishes the identity header names it
// trusts, and adds them to the names stripped from clients. It returns
// once the ConfigMap was read: skewgate refuses to start when it cannot
// know which names the apiservers trust.
func (p *Proxy) watchHeaderNames(ctx context.Context, client kubernetes.Interface) error {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(metav1.NamespaceSystem),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", AuthenticationConfigMap).String()
		}))
	inf := f.Core().V1().ConfigMaps()
	apply := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		names, err := HeaderNamesFromConfigMap(cm)
		if err != nil {
			p.cfg.Log.Error("identity header names not read; the flags' and earlier ones stay stripped", "err", err)
			return
		}
		p.handler.TrustHeaderNames(names)
		p.cfg.Log.Info("identity header names kube-apiserver trusts", "user", names.User, "uid", names.UID, "group", names.Group, "extraPrefix", names.ExtraPrefix)
	}
	inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: apply, UpdateFunc: func(_, obj any) { apply(obj) }})
	// A first read says whether the ConfigMap can be read at all.
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(rctx, AuthenticationConfigMap, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("kube-system/%s, where kube-apiserver publishes the identity headers it trusts, not readable "+
			"(skewgate's user needs get, list and watch on it): %w", AuthenticationConfigMap, err)
	}
	f.Start(ctx.Done())
	for _, ok := range f.WaitForCacheSync(rctx.Done()) {
		if !ok {
			return errors.New("kube-system/" + AuthenticationConfigMap + " not synced within 30s")
		}
	}
	return nil
}

// watchBuiltIn follows the groups kube-apiserver registers for itself
// (membership.WatchAPIServices). Unreadable, they cost only a new
// release's groups: a warning, never a failure to start.
func (p *Proxy) watchBuiltIn(ctx context.Context, rc *rest.Config) {
	rc = rest.CopyConfig(rc)
	rc.UserAgent = p.cfg.UserAgent
	client, err := dynamic.NewForConfig(rc)
	if err == nil {
		err = p.Members.WatchAPIServices(ctx, client)
	}
	if err != nil {
		b := p.Members.BuiltIn()
		p.cfg.Log.Warn("built-in groups not read from the cluster: a group only a release newer than skewgate adds does not count as built in (no window from it, a 404 instead of a 503 while its server is unknown)",
			"using", b.Source, "err", err)
	}
}
