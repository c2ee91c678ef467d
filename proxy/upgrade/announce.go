package upgrade

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// kubeadm announces an upgrade before it changes any manifest: the
// preflight of `kubeadm upgrade apply` runs a health check that creates
// the Job kube-system/upgrade-health-check-<unix ms> (plain
// upgrade-health-check before kubeadm 1.31) and waits for it to complete
// (cmd/kubeadm/app/phases/upgrade/health.go, the same in 1.35 through
// 1.37). Only then does it pull images, upgrade etcd and write the new
// kube-apiserver manifest, so the Job is there seconds to minutes before
// the first apiserver stops, while a node's manifest changes only at the
// instant its kubelet stops it. `kubeadm upgrade plan` runs the same
// check: an operator planning an upgrade opens the window too.
const KubeadmJobPrefix = "upgrade-health-check"

// isKubeadmJob says whether name is a kubeadm upgrade's health-check Job.
func isKubeadmJob(name string) bool {
	if name == KubeadmJobPrefix {
		return true
	}
	rest, ok := strings.CutPrefix(name, KubeadmJobPrefix+"-")
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

// announced is a kubeadm health-check Job seen, and until when it counts.
type announced struct {
	name  string
	until time.Time
}

func (a announced) reason() string {
	return fmt.Sprintf("kubeadm upgrade announced: Job %s/%s (the preflight of kubeadm upgrade apply, or plan)", metav1.NamespaceSystem, a.name)
}

// announcements are the health-check Jobs that count at now: each from
// its creation, or from when this agent first saw it if its creation
// claims a later time, for AnnounceFor, while it exists. A Job kubeadm
// failed to delete (its TTL is 65 s) stops counting then; one dated
// ahead counts no longer than one created now.
func (s *Signal) announcements(now time.Time) []announced {
	var out []announced
	for _, j := range s.listJobs() {
		if !isKubeadmJob(j.Name) {
			continue
		}
		from := s.seen.since("job/"+j.Name, j.CreationTimestamp.Time, now)
		if a := (announced{name: j.Name, until: from.Add(s.cfg.AnnounceFor)}); now.Before(a.until) {
			out = append(out, a)
		}
	}
	return out
}

func (s *Signal) listJobs() []*batchv1.Job {
	if s.jobs == nil {
		return nil
	}
	js, _ := s.jobs.List(labels.Everything()) // a cache lister does not fail
	return js
}

// jobMeta keeps of a Job what announcements read: kube-system's other
// Jobs (CronJobs' runs, add-ons' hooks) cost a name each in the cache.
func jobMeta(obj any) (any, error) {
	j, ok := obj.(*batchv1.Job)
	if !ok {
		return obj, nil // a tombstone
	}
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: j.Namespace,
		ResourceVersion: j.ResourceVersion, CreationTimestamp: j.CreationTimestamp}}, nil
}

// watchErrors logs the Job informer's first failure, not each retry: a
// Role without list/watch on jobs (one from before this signal) leaves
// the leases and the manifest as the signals.
type watchErrors struct {
	s       *Signal
	failing bool
}

func (w *watchErrors) handle(_ *cache.Reflector, err error) {
	w.s.mu.Lock()
	first := !w.failing
	w.failing = true
	w.s.mu.Unlock()
	if first {
		w.s.cfg.Log.Warn("kubeadm's upgrade announcement not followed: the window opens when an apiserver's manifest changes, as its apiserver stops", "err", err)
	}
}
