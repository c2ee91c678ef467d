package removal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// JobName is the uninstall Job of node (a node name is a DNS subdomain,
// at most 253 characters; a Job's name must leave 11 for its pods').
func JobName(node string) string {
	name := "skewgate-uninstall-" + node
	if len(name) > 52 {
		name = name[:52]
	}
	return strings.TrimRight(name, ".-")
}

// Job is the one-shot `skewgate uninstall` on node: the DaemonSet's
// securityContext with only the capabilities detaching needs, the bpffs
// and the state directory from the host, no API credential.
func Job(o Options, node string) *batchv1.Job {
	stateDir := filepath.Dir(o.StateFile)
	labels := map[string]string{"app.kubernetes.io/name": "skewgate-uninstall", "app.kubernetes.io/part-of": "skewgate"}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(node), Namespace: o.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](2),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// As the DaemonSet's pods are placed: by node name through
					// the scheduler, every taint tolerated.
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
							MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
						}}},
					}},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					// The node's network namespace, as the DaemonSet's: the
					// Job needs no pod network (a control plane whose CNI is
					// gone, or not yet there, still gets cleaned) and opens
					// no socket; detaching needs none.
					HostNetwork:                  true,
					DNSPolicy:                    corev1.DNSDefault,
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					PriorityClassName:            "system-node-critical",
					Containers: []corev1.Container{{
						Name: "uninstall", Image: o.Image, ImagePullPolicy: corev1.PullIfNotPresent,
						Args: []string{"uninstall", "--pin-path=" + o.PinPath, "--state-file=" + o.StateFile},
						SecurityContext: &corev1.SecurityContext{
							AppArmorProfile:          &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
							SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
							ReadOnlyRootFilesystem:   ptr.To(true),
							AllowPrivilegeEscalation: ptr.To(false),
							RunAsUser:                ptr.To[int64](0),
							// Opening pinned links and detaching them
							// (BPF_LINK_DETACH): what attaching them needed.
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"BPF", "NET_ADMIN"}},
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "bpffs", MountPath: filepath.Dir(o.PinPath)},
							{Name: "state", MountPath: stateDir},
						},
					}},
					Volumes: []corev1.Volume{
						hostPath("bpffs", filepath.Dir(o.PinPath), corev1.HostPathDirectory),
						// The DaemonSet made it so; on a node without it the
						// container runtime would make it whatever the type.
						hostPath("state", stateDir, corev1.HostPathDirectoryOrCreate),
					},
				},
			},
		},
	}
}

func hostPath(name, path string, t corev1.HostPathType) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
}

// runJobs starts a Job per node and waits for all of them; each Job's log
// is written to w. A Job that already exists (an interrupted run) is
// replaced.
func runJobs(ctx context.Context, cs kubernetes.Interface, o Options, nodes []corev1.Node, w io.Writer) ([]string, error) {
	var names []string
	for _, n := range nodes {
		j := Job(o, n.Name)
		if err := deleteJob(ctx, cs, o, j.Name); err != nil {
			return names, err
		}
		if _, err := cs.BatchV1().Jobs(o.Namespace).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			return names, fmt.Errorf("create job %s/%s: %w", o.Namespace, j.Name, err)
		}
		names = append(names, j.Name)
	}
	var errs []error
	for i, name := range names {
		errs = append(errs, waitJob(ctx, cs, o, nodes[i].Name, name, w))
	}
	return names, errors.Join(errs...)
}

// waitJob waits until the Job completes or fails and writes its log.
func waitJob(ctx context.Context, cs kubernetes.Interface, o Options, node, name string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	for {
		j, err := cs.BatchV1().Jobs(o.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("job %s/%s: %w", o.Namespace, name, err)
		}
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				writeLog(ctx, cs, o.Namespace, node, name, w)
				return nil
			case batchv1.JobFailed:
				writeLog(ctx, cs, o.Namespace, node, name, w)
				return fmt.Errorf("job %s/%s on %s failed: %s", o.Namespace, name, node, c.Message)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s/%s on %s not finished: %w; its pods: %s (kubectl -n %s describe pods -l job-name=%s)", o.Namespace, name, node, ctx.Err(), podStates(cs, o.Namespace, name), o.Namespace, name)
		case <-time.After(o.Poll):
		}
	}
}

// writeLog writes the log of the Job's last pod, each line after the
// node's name.
func writeLog(ctx context.Context, cs kubernetes.Interface, ns, node, job string, w io.Writer) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil || len(pods.Items) == 0 {
		fmt.Fprintf(w, "%s: no log of job %s: %v\n", node, job, err)
		return
	}
	last := pods.Items[0]
	for _, p := range pods.Items[1:] {
		if p.CreationTimestamp.After(last.CreationTimestamp.Time) {
			last = p
		}
	}
	out, err := cs.CoreV1().Pods(ns).GetLogs(last.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		fmt.Fprintf(w, "%s: no log of pod %s: %v\n", node, last.Name, err)
		return
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fmt.Fprintf(w, "%s: %s\n", node, l)
	}
}

// deleteJobs deletes the Jobs and waits until they and their pods are
// gone (foreground deletion: the Job goes after its pods).
func deleteJobs(ctx context.Context, cs kubernetes.Interface, o Options, names []string, w io.Writer) error {
	var errs []error
	for _, name := range names {
		if err := deleteJob(ctx, cs, o, name); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(w, "deleted job %s/%s\n", o.Namespace, name)
	}
	return errors.Join(errs...)
}

// deleteJob deletes one Job, if it exists, and waits until it is gone.
func deleteJob(ctx context.Context, cs kubernetes.Interface, o Options, name string) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	fg := metav1.DeletePropagationForeground
	err := cs.BatchV1().Jobs(o.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg})
	for {
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("delete job %s/%s: %w", o.Namespace, name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s/%s not gone: %w", o.Namespace, name, ctx.Err())
		case <-time.After(o.Poll):
		}
		_, err = cs.BatchV1().Jobs(o.Namespace).Get(ctx, name, metav1.GetOptions{})
	}
}

// podStates says where the Job's pods are stuck: phase and waiting
// reason, for an error that names the cause (no pod network, no image).
func podStates(cs kubernetes.Interface, ns, job string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		return err.Error()
	}
	var states []string
	for _, p := range pods.Items {
		st := fmt.Sprintf("%s %s", p.Name, p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil {
				st += fmt.Sprintf(" (%s: %s)", w.Reason, w.Message)
			}
		}
		states = append(states, st)
	}
	if len(states) == 0 {
		return "none"
	}
	return strings.Join(states, ", ")
}
