package removal

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/skewgate/skewgate/proxy"
	"github.com/skewgate/skewgate/proxy/upgrade"
)

func TestNames(t *testing.T) {
	if SwitchConfigMap != proxy.SwitchConfigMap {
		t.Errorf("SwitchConfigMap %q, the proxy watches %q", SwitchConfigMap, proxy.SwitchConfigMap)
	}
}

func options() Options {
	o := Defaults()
	o.Timeout, o.Poll = 5*time.Second, 10*time.Millisecond
	return o
}

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func lease(ns, name string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func pod(name string, terminating bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, Labels: map[string]string{"app.kubernetes.io/name": "skewgate"}},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "skewgate", Image: "registry.example/skewgate:v0.1.0"}}},
	}
	if terminating {
		p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	}
	return p
}

// cluster is a fake cluster with two control-plane nodes and a worker,
// what skewgate and its operator leave, and Jobs that complete at once.
func cluster(objs ...runtime.Object) *fake.Clientset {
	cp := map[string]string{ControlPlaneLabel: ""}
	objs = append(objs,
		node("node-a", cp), node("node-b", cp), node("worker", nil),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: upgrade.LeaseNamespace}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: SwitchConfigMap}},
		lease(upgrade.LeaseNamespace, upgrade.LeaseName("node-a")),
		lease("kube-system", upgrade.LeaseName("node-b")),
		lease("kube-system", "kube-controller-manager"),
	)
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		j := a.(k8stesting.CreateAction).GetObject().(*batchv1.Job)
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		return false, nil, nil
	})
	return cs
}

// terminatingPodGoes is a cluster whose skewgate pod is terminating and is
// gone by the second time Uninstall lists the pods: it waits, then goes on.
func terminatingPodGoes() *fake.Clientset {
	cs := cluster(pod("skewgate-old", true))
	lists := 0
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if lists++; lists == 2 {
			cs.Tracker().Delete(a.GetResource(), "kube-system", "skewgate-old")
		}
		return false, nil, nil
	})
	return cs
}

func jobs(t *testing.T, cs *fake.Clientset) []string {
	t.Helper()
	var names []string
	for _, a := range cs.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "jobs" {
			names = append(names, c.GetObject().(*batchv1.Job).Name)
		}
	}
	return names
}

// TestRefusesWhileRunning: with the DaemonSet there, or a pod of skewgate
// not being deleted, nothing is started or deleted.
func TestRefusesWhileRunning(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "skewgate"}}
	for name, obj := range map[string]runtime.Object{"daemonset": ds, "pod": pod("skewgate-x", false)} {
		t.Run(name, func(t *testing.T) {
			cs := cluster(obj)
			o := options()
			o.Image = "skewgate:v0.1.0"
			var out strings.Builder
			err := Uninstall(context.Background(), cs, o, &out)
			if !errors.Is(err, ErrStillRunning) {
				t.Fatalf("err %v, want ErrStillRunning", err)
			}
			if j := jobs(t, cs); len(j) != 0 || out.Len() != 0 {
				t.Errorf("refused, yet jobs %v started and printed %q", j, out.String())
			}
			if _, err := cs.CoreV1().ConfigMaps("kube-system").Get(context.Background(), SwitchConfigMap, metav1.GetOptions{}); err != nil {
				t.Errorf("refused, yet the switch is gone: %v", err)
			}
			t.Log(err)
		})
	}
}

func TestImageRequired(t *testing.T) {
	cs := cluster()
	err := Uninstall(context.Background(), cs, options(), &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "--image") || len(jobs(t, cs)) != 0 {
		t.Errorf("no image, no pods: %v, jobs %v; want an error naming --image and no job", err, jobs(t, cs))
	}
}

// TestUninstall: the image of the terminating pods, waited for; a Job per
// control-plane node, pinned to it; then the switch, every upgrade Lease
// in both namespaces (no other Lease) and the Jobs gone.
func TestUninstall(t *testing.T) {
	cs := terminatingPodGoes()
	var out strings.Builder
	if err := Uninstall(context.Background(), cs, options(), &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("output:\n%s", out.String())
	created := jobs(t, cs)
	if strings.Join(created, " ") != "skewgate-uninstall-node-a skewgate-uninstall-node-b" {
		t.Errorf("jobs %v: want one per control-plane node", created)
	}
	for _, a := range cs.Actions() {
		c, ok := a.(k8stesting.CreateAction)
		if !ok || a.GetResource().Resource != "jobs" {
			continue
		}
		spec := c.GetObject().(*batchv1.Job).Spec.Template.Spec
		if !spec.HostNetwork || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("job pod: hostNetwork %v, token %v; want the node's network and no token", spec.HostNetwork, spec.AutomountServiceAccountToken)
		}
		if got := spec.Containers[0].Image; got != "registry.example/skewgate:v0.1.0" {
			t.Errorf("job image %q: want the terminating pods'", got)
		}
		if got := spec.Containers[0].Args; strings.Join(got, " ") != "uninstall --pin-path=/sys/fs/bpf/skewgate --state-file=/var/lib/skewgate/state.json" {
			t.Errorf("job args %v", got)
		}
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, SwitchConfigMap, metav1.GetOptions{}); err == nil {
		t.Error("the switch ConfigMap is still there")
	}
	for _, ns := range []string{upgrade.LeaseNamespace, "kube-system"} {
		ls, _ := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		for _, l := range ls.Items {
			if strings.HasPrefix(l.Name, upgrade.LeasePrefix) {
				t.Errorf("lease %s/%s still there", ns, l.Name)
			}
		}
	}
	if _, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{}); err != nil {
		t.Errorf("the controller-manager's lease: %v", err)
	}
	if js, _ := cs.BatchV1().Jobs("kube-system").List(ctx, metav1.ListOptions{}); len(js.Items) != 0 {
		t.Errorf("%d jobs left", len(js.Items))
	}
	for _, want := range []string{"deleted configmap kube-system/skewgate\n", "deleted lease skewgate/skewgate-upgrade-node-a\n",
		"deleted lease kube-system/skewgate-upgrade-node-b\n", "deleted job kube-system/skewgate-uninstall-node-b\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestJobName(t *testing.T) {
	long := strings.Repeat("n", 100)
	if got := JobName(long); len(got) > 52 {
		t.Errorf("JobName of a long node: %d characters", len(got))
	}
}

// TestUninstallAsksOnlyItsPermissions: every request Uninstall makes is
// one of Permissions — the rights docs/security.md tells an operator to
// hold, which lab/e2e/daemonset grants alone to the user it uninstalls
// as — and every one of them is asked.
func TestUninstallAsksOnlyItsPermissions(t *testing.T) {
	cs := terminatingPodGoes()
	// Each Job's pod, whose log is read.
	cs.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		j := a.(k8stesting.CreateAction).GetObject().(*batchv1.Job)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: j.Name + "-x", Labels: map[string]string{"job-name": j.Name}}}
		return false, nil, cs.Tracker().Add(p)
	})
	if err := Uninstall(context.Background(), cs, options(), &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	perms := Permissions(options())
	used := make([]bool, len(perms))
	for _, a := range cs.Actions() {
		r := a.GetResource()
		name := ""
		if n, ok := a.(interface{ GetName() string }); ok {
			name = n.GetName()
		}
		i := slices.IndexFunc(perms, func(p authorizationv1.ResourceAttributes) bool {
			return p.Verb == a.GetVerb() && p.Group == r.Group && p.Resource == r.Resource && p.Subresource == a.GetSubresource() &&
				p.Namespace == a.GetNamespace() && (p.Name == "" || p.Name == name)
		})
		if i < 0 {
			t.Errorf("%s %s/%s %s/%s (%s): in no permission", a.GetVerb(), r.Resource, a.GetSubresource(), a.GetNamespace(), name, r.Group)
			continue
		}
		used[i] = true
	}
	for i, p := range perms {
		if !used[i] {
			t.Errorf("permission %+v: never asked", p)
		}
	}
}

// TestLeavesAGoneNamespace: skewgate's namespace deleted (kubectl delete
// -k) or terminating takes its Leases with it: Uninstall asks nothing
// there — its user's RoleBindings there are gone too — and says so.
func TestLeavesAGoneNamespace(t *testing.T) {
	for name, change := range map[string]func(*fake.Clientset){
		"deleted": func(cs *fake.Clientset) {
			cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("namespaces"), "", upgrade.LeaseNamespace)
		},
		"terminating": func(cs *fake.Clientset) {
			ns, _ := cs.CoreV1().Namespaces().Get(context.Background(), upgrade.LeaseNamespace, metav1.GetOptions{})
			ns.Status.Phase = corev1.NamespaceTerminating
			cs.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			cs := cluster()
			change(cs)
			cs.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetNamespace() == upgrade.LeaseNamespace {
					return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("no RoleBinding left"))
				}
				return false, nil, nil
			})
			o := options()
			o.Image = "skewgate:v0.1.0"
			var out strings.Builder
			if err := Uninstall(context.Background(), cs, o, &out); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			for _, want := range []string{"namespace skewgate is gone or going, and its Leases with it\n", "deleted lease kube-system/skewgate-upgrade-node-b\n"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}
