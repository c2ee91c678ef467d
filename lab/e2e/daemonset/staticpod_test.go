package daemonset

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
	upgradesignal "github.com/skewgate/skewgate/proxy/upgrade"
)

// staticUser is the static pod's identity toward the cluster: a kubeadm
// user certificate (docs/deploy.md), bound to the base's Roles.
const staticUser = "system:skewgate"

// staticPod runs `skewgate manifest static-pod` on node a as kubeadm's
// kubelet would, from its manifests directory: the false 404 fixed through
// the node's address, an upgrade by editing the file with no failed new
// connection, and removal by deleting it. The DaemonSet is gone by now;
// its pins stay, and the static pod takes them over.
func staticPod(t *testing.T, a lab.Node) {
	c := admin(t)
	bindStaticUser(t, c)
	kubeconfig := "/etc/kubernetes/pki/skewgate.conf" // the lab binds only pki/ of /etc/kubernetes
	writeStaticKubeconfig(t, filepath.Join(plane.KubeadmPKIDir(a), "skewgate.conf"))
	manifest := filepath.Join(plane.StaticPodDir(a), "skewgate.yaml")
	write := func(tag string) {
		t.Helper()
		out, err := exec.Command(skewgateBin, "manifest", "static-pod", "--image", "skewgate:"+tag, "--kubeconfig", kubeconfig).Output()
		if err != nil {
			t.Fatalf("skewgate manifest static-pod: %v", err)
		}
		// As an operator would: a file appears whole (kubelet reads partial
		// files too, and would retry).
		tmp := filepath.Join(filepath.Dir(manifest), ".skewgate.yaml")
		if err := os.WriteFile(tmp, out, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, manifest); err != nil {
			t.Fatal(err)
		}
	}

	t0 := time.Now()
	write(images[1])
	waitNodeSteering(t, a, true, 2*time.Minute)
	t.Logf("static pod %s written → steering engaged on %s in %s", images[1], a.Name, time.Since(t0).Round(time.Millisecond))
	waitVersion(t, a, images[1], time.Minute)
	code, route, err := labtest.Get(labtest.FreshClient(t, plane), a.URL()+workloadsPath)
	if err != nil || code != http.StatusOK || route != "peer" {
		t.Fatalf("through the static pod, GET %s on %s: %d (route %q) %v, want 200 from a peer", workloadsPath, a.Name, code, route, err)
	}

	loop := startLoop(t, a.URL())
	t1 := time.Now()
	write(images[0])
	waitVersion(t, a, images[0], 2*time.Minute)
	waitNodeSteering(t, a, true, time.Minute)
	upgraded := time.Since(t1)
	time.Sleep(time.Second)
	loop.Stop()
	t.Logf("manifest edited %s → %s: the new pod steering in %s; %s", images[1], images[0], upgraded.Round(time.Millisecond), loop)
	if loop.failed != 0 || loop.tried == 0 {
		t.Errorf("upgrade by editing the manifest: %s", loop)
	}

	loop = startLoop(t, a.URL())
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	fellBack := waitNodeSteering(t, a, false, time.Minute)
	time.Sleep(time.Second)
	loop.Stop()
	t.Logf("manifest deleted: steering failed open after %s; %s", fellBack.Round(time.Millisecond), loop)
	if loop.failed != 0 || loop.tried == 0 {
		t.Errorf("removal: %s", loop)
	}
	if code, route, err := labtest.Get(labtest.FreshClient(t, plane), a.URL()+workloadsPath); err != nil || code != http.StatusNotFound || route != "" {
		t.Errorf("static pod removed: node-a answers %d (route %q) %v, want its own (false) 404", code, route, err)
	}
}

// waitVersion waits until node n's skewgate process is the build version.
func waitVersion(t *testing.T, n lab.Node, version string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if pid, ok := findPodPID(n); ok {
			out, err := exec.Command("/proc/"+pid+"/root/skewgate", "version").Output()
			if last = string(out); err == nil && strings.HasPrefix(last, "skewgate "+version+"\n") {
				return
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: skewgate %s not running within %s (last: %q)", n.Name, version, timeout, last)
}

// bindStaticUser binds the base's Roles (list and watch of the apiservers'
// addresses, the identity header ConfigMap, the upgrade leases in
// skewgate's namespace), its ClusterRole (the built-in APIServices) and
// system:auth-delegator to the static pod's
// user, as docs/deploy.md tells operators to.
func bindStaticUser(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: staticUser, APIGroup: rbacv1.GroupName}}
	meta := metav1.ObjectMeta{Name: "skewgate-static"}
	for _, ns := range []string{"default", "kube-system", upgradesignal.LeaseNamespace} {
		rb := &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subject, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "skewgate"}}
		if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for name, role := range map[string]string{"skewgate-static": "system:auth-delegator", "skewgate-static-apiservices": "skewgate"} {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
		if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// writeStaticKubeconfig writes a kubeconfig for staticUser toward the
// node's apiserver on loopback, verified as "kubernetes", as `kubeadm
// kubeconfig user` and docs/deploy.md make it.
func writeStaticKubeconfig(t *testing.T, path string) {
	t.Helper()
	ca, err := lab.LoadCA(plane.PKI.CAFile, plane.PKI.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Sign(lab.Leaf{CN: staticUser})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(plane.PKI.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubernetes"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443", TLSServerName: "kubernetes", CertificateAuthorityData: caPEM}
	cfg.AuthInfos[staticUser] = &clientcmdapi.AuthInfo{ClientCertificateData: pemCert(cert), ClientKeyData: keyPEM}
	cfg.Contexts["skewgate"] = &clientcmdapi.Context{Cluster: "kubernetes", AuthInfo: staticUser}
	cfg.CurrentContext = "skewgate"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Error(err)
		}
	})
}
