package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The cluster-wide steering switch: kube-system/skewgate, key "steering",
// value always, auto or off. Every agent follows it, and it wins over
// --steering-mode: `kubectl patch` arms every node before an upgrade, or
// turns every node off, and the choice survives restarts and reboots.
// (The per-node pinned kill switch, `skewgate steer off`, still wins on
// its node.)
const (
	SwitchConfigMap = "skewgate"
	SwitchKey       = "steering"
	// GraceKey ends or extends the rollback grace on every node: an
	// RFC 3339 time; every grace that began before it ends then (see
	// membership.SetGraceUntil). A time, not a verb like "end" or a
	// duration: every node reads the same instant whenever it reads the
	// ConfigMap (a restarted skewgate too), and a value left from one
	// rollback cannot end the next one's grace, which begins after it.
	GraceKey = "rollback-grace-until"
)

// graceOverride reads GraceKey from cm: zero when absent (or cm is nil).
func graceOverride(cm *corev1.ConfigMap) (time.Time, error) {
	v, ok := "", false
	if cm != nil {
		v, ok = cm.Data[GraceKey]
	}
	if !ok || strings.TrimSpace(v) == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
	if err != nil {
		return time.Time{}, fmt.Errorf("kube-system/%s %s: want an RFC 3339 time such as 2006-01-02T15:04:05Z: %w", SwitchConfigMap, GraceKey, err)
	}
	return t, nil
}

// ValidModes are the values the switch takes.
var ValidModes = map[string]bool{"always": true, "auto": true, "off": true}

// SteeringSwitch is the cluster's choice, as last read.
type SteeringSwitch struct {
	mode atomic.Pointer[string]
	// seen is each key's value as last read (nil: absent; the map nil
	// before the first read), to log and count every change of it.
	seen    map[string]*string
	changes *prometheus.CounterVec
}

// switchKeys are the keys of the switch skewgate reads.
var switchKeys = []string{SwitchKey, GraceKey}

// register adds skewgate_switch_changes_total to reg.
func (s *SteeringSwitch) register(reg prometheus.Registerer) {
	s.changes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "skewgate_switch_changes_total",
		Help: "Changes of a key of the cluster switch kube-system/skewgate (set, changed or removed) this skewgate read: a write that moves every node."}, []string{"key"})
	for _, k := range switchKeys {
		s.changes.WithLabelValues(k)
	}
	reg.MustRegister(s.changes)
}

// note logs and counts every key of cm (nil: the ConfigMap is gone) whose
// value differs from the last read. The first read is logged, not counted:
// a restart of skewgate changes nothing in the cluster. Called by the
// informer's handler only, one event at a time.
func (s *SteeringSwitch) note(cm *corev1.ConfigMap, log *slog.Logger) {
	first := s.seen == nil
	if first {
		s.seen = map[string]*string{}
	}
	for _, k := range switchKeys {
		var now *string
		if cm != nil {
			if v, ok := cm.Data[k]; ok {
				now = &v
			}
		}
		prev := s.seen[k]
		if !first && (prev == nil) == (now == nil) && (prev == nil || *prev == *now) {
			continue
		}
		s.seen[k] = now
		if first && now == nil {
			continue
		}
		args := []any{"key", k, "from", valueOf(prev), "to", valueOf(now)}
		if cm != nil {
			args = append(args, "resourceVersion", cm.ResourceVersion, "manager", lastManager(cm))
		}
		if first {
			log.Info("cluster switch kube-system/"+SwitchConfigMap+" read", args...)
			continue
		}
		log.Info("cluster switch kube-system/"+SwitchConfigMap+" changed", args...)
		if s.changes != nil {
			s.changes.WithLabelValues(k).Inc()
		}
	}
}

// valueOf shows a value for the log: absent is not the empty string.
func valueOf(v *string) string {
	if v == nil {
		return "(absent)"
	}
	return fmt.Sprintf("%q", *v)
}

// lastManager is the field manager of cm's latest write, as the
// apiserver recorded it (kubectl's, a controller's): who changed it, as
// far as the object tells; the audit log tells the user.
func lastManager(cm *corev1.ConfigMap) string {
	who, at := "", time.Time{}
	for _, f := range cm.ManagedFields {
		if f.Time != nil && !f.Time.Time.Before(at) {
			who, at = f.Manager, f.Time.Time
		}
	}
	return who
}

// Mode returns the mode the cluster's ConfigMap sets, and whether it sets
// a valid one.
func (s *SteeringSwitch) Mode() (string, bool) {
	if m := s.mode.Load(); m != nil {
		return *m, true
	}
	return "", false
}

func (s *SteeringSwitch) set(cm *corev1.ConfigMap, log func(msg string, args ...any)) {
	v, ok := "", false
	if cm != nil {
		v, ok = cm.Data[SwitchKey]
	}
	prev, had := s.Mode()
	switch {
	case ok && ValidModes[v]:
		s.mode.Store(&v)
	case ok:
		log("kube-system/"+SwitchConfigMap+": invalid steering mode; ignored, the flag's mode applies", "value", v)
		s.mode.Store(nil)
	default:
		s.mode.Store(nil)
	}
	if now, has := s.Mode(); now != prev || has != had {
		log("cluster steering mode changed", "mode", now, "set", has)
	}
}

// setGraceOverride applies the cluster's rollback-grace-until; an
// unreadable value is no override (the flag's grace holds), with a
// warning: holding every node's breath on a typo would be worse.
func (p *Proxy) setGraceOverride(cm *corev1.ConfigMap) {
	until, err := graceOverride(cm)
	if err != nil {
		p.cfg.Log.Warn("rollback grace override ignored; --rollback-grace applies", "err", err)
	}
	p.Members.SetGraceUntil(until)
}

// watchSwitch follows kube-system/skewgate. It returns once the first
// read is done; a ConfigMap that cannot be read (RBAC) leaves the flag's
// mode in force, with a warning.
func (p *Proxy) watchSwitch(ctx context.Context, client kubernetes.Interface) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(metav1.NamespaceSystem),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", SwitchConfigMap).String()
		}))
	inf := f.Core().V1().ConfigMaps().Informer()
	log := func(msg string, args ...any) { p.cfg.Log.Info(msg, args...) }
	set := func(obj any) {
		cm, _ := obj.(*corev1.ConfigMap)
		p.Switch.note(cm, p.cfg.Log)
		p.Switch.set(cm, log)
		p.setGraceOverride(cm)
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(any) { set(nil) },
	})
	_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		if !errors.Is(err, context.Canceled) {
			p.cfg.Log.Warn("kube-system/"+SwitchConfigMap+" not followed; --steering-mode applies", "err", err)
		}
	})
	f.Start(ctx.Done())
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	f.WaitForCacheSync(sctx.Done())
}
