package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// notSkewgate are flags the README names that belong to other programs:
// kube-apiserver's, kubectl's, helm's, make's variables and the lab's.
var notSkewgate = []string{
	"--tls-server-name", "--server", "--in-tree-proxy", "--cacert", "--cert", "--key",
	"--nodes", "--dir", "--tag", "--image", "--kubelet", "--skewgate", "--from-literal",
	"--control-plane", "--upload-certs", "--kubeadm", // kubeadm's, and the lab's kubeadm mode
	"--namespace", "--set", // helm install's
	"--goaway-chance",     // kube-apiserver's
	"--through-apiserver", // kubectl skewgate's
}

// flagsOf are the flags of cmd and every subcommand, by name.
func flagsOf(cmd *cobra.Command, into map[string]*pflag.Flag) {
	cmd.Flags().VisitAll(func(f *pflag.Flag) { into["--"+f.Name] = f })
	cmd.PersistentFlags().VisitAll(func(f *pflag.Flag) { into["--"+f.Name] = f })
	for _, c := range cmd.Commands() {
		flagsOf(c, into)
	}
}

// TestREADMEFlagsExist: every skewgate flag the README names is a flag of
// some skewgate command, and every flag of `skewgate run` is named in the
// README or in a document it links: a renamed or removed flag, or a new
// undocumented one, fails here.
func TestREADMEFlagsExist(t *testing.T) {
	flags := map[string]*pflag.Flag{}
	root := newRootCmd()
	flagsOf(root, flags)
	if root.Version != "" { // cobra adds --version when it runs
		flags["--version"] = &pflag.Flag{Name: "version"}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`--[a-z][a-z0-9-]*[a-z0-9]`).FindAllString(string(readme), -1)
	slices.Sort(named)
	named = slices.Compact(named)
	for _, n := range named {
		if flags[n] != nil || slices.ContainsFunc(notSkewgate, func(p string) bool { return n == p || strings.HasSuffix(p, "-") && strings.HasPrefix(n, p) }) {
			continue
		}
		t.Errorf("README.md names %s, which no skewgate command has", n)
	}
	docs := string(readme)
	for _, d := range []string{"../../docs/deploy.md", "../../docs/bpf.md", "../../docs/security.md", "../../docs/operations.md", "../../docs/routing.md", "../../docs/steering-modes.md", "../../docs/runbook.md"} {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		docs += string(b)
	}
	run := map[string]*pflag.Flag{}
	flagsOf(newRunCmd(), run)
	for name, f := range run {
		if f.Hidden || name == "--help" || strings.HasPrefix(name, "--log") || name == "--v" || name == "--vmodule" {
			continue
		}
		if !regexp.MustCompile(regexp.QuoteMeta(name) + `\b`).MatchString(docs) {
			t.Errorf("skewgate run %s (%s) is in neither README.md nor the docs it links", name, f.Usage)
		}
	}
}

// Issue 44: Go comments cited a design card the repository does not hold. A
// document of this repository a comment names — a top-level one
// (README.md) or one under docs/ or deploy/ — exists.
func TestGoCitesOnlyTheRepository(t *testing.T) {
	const top = "../.."
	cite := regexp.MustCompile(`\b(?:(?:docs|deploy)/[\w./-]+|[A-Z][A-Z_]+)\.md\b`)
	files := 0
	err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != top || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, c := range f.Comments {
			for _, doc := range cite.FindAllString(c.Text(), -1) {
				if _, err := os.Stat(filepath.Join(top, doc)); err != nil {
					t.Errorf("%s: a comment cites %s, which the repository does not hold", path, doc)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files: the walk is broken", files)
	}
}
