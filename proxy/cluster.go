package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// clusterClient is a client for the cluster kubeconfig names (empty: the
// in-cluster config), as userAgent.
func clusterClient(kubeconfig, userAgent string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg.UserAgent = userAgent
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	return client, nil
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
