package lab

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// kubeadmConstants is the file of k8s.io/kubernetes that names the etcd
// kubeadm deploys.
const kubeadmConstants = "cmd/kubeadm/app/constants/constants.go"

var kubeadmEtcd sync.Map // Kubernetes version → etcd version

// KubeadmEtcdVersion is the etcd (v3.7.1) that kubeadm of Kubernetes
// version v (v1.38.0-beta.0) deploys, so the lab runs what users run and
// a kubeadm upgrade upgrades etcd as theirs does. It is kubeadm's own
// constant DefaultEtcdVersion, read from k8s.io/kubernetes@v's source in
// the module cache: no table here to keep up with releases. kubeadm
// deploys exactly that for its own release: SupportedEtcdVersion maps its
// minor to it (1.35, 1.36) or lacks the minor and falls back to its newest
// entry, which is it (1.37, 1.38).
func KubeadmEtcdVersion(ctx context.Context, v string) (string, error) {
	if e, ok := kubeadmEtcd.Load(v); ok {
		return e.(string), nil
	}
	dir, err := os.MkdirTemp("", "skewlab-etcd-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	const module = "k8s.io/kubernetes"
	toolchain, err := toolchainFor(ctx, dir, module, v)
	if err != nil {
		return "", err
	}
	if toolchain != "" {
		ctx = withToolchain(ctx, toolchain)
	}
	m, err := downloadModule(ctx, dir, module, v)
	if err != nil {
		return "", err
	}
	src, err := os.ReadFile(filepath.Join(m.Dir, kubeadmConstants))
	if err != nil {
		return "", fmt.Errorf("kubeadm %s: %w", v, err)
	}
	e, err := parseDefaultEtcdVersion(src)
	if err != nil {
		return "", fmt.Errorf("kubeadm %s: %s: %w", v, kubeadmConstants, err)
	}
	kubeadmEtcd.Store(v, e)
	return e, nil
}

// parseDefaultEtcdVersion finds `DefaultEtcdVersion = "3.7.1-0"` (an
// image tag: version, then the image's revision) in kubeadm's constants
// and returns the etcd version, v3.7.1.
func parseDefaultEtcdVersion(src []byte) (string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), kubeadmConstants, src, parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			vs, ok := s.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, n := range vs.Names {
				if n.Name != "DefaultEtcdVersion" || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return "", fmt.Errorf("DefaultEtcdVersion is not a string literal")
				}
				tag, err := strconv.Unquote(lit.Value)
				if err != nil {
					return "", err
				}
				return etcdVersionOfTag(tag), nil
			}
		}
	}
	return "", fmt.Errorf("no DefaultEtcdVersion")
}

// etcdVersionOfTag is the etcd version of an etcd image tag as kubeadm
// names them: 3.7.1-0 → v3.7.1.
func etcdVersionOfTag(tag string) string {
	v, _, _ := strings.Cut(tag, "-")
	return "v" + v
}
