// Command skewgate is the node agent that keeps clients from false 404s while
// kube-apiservers of different versions serve one cluster.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs one command line and returns the exit status: 0 done, 1 the
// command failed, 2 the command line is wrong (an unknown subcommand, a
// missing or invalid flag): scripts tell a typo from a failure.
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "skewgate:", err)
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", ue.cmd)
		return 2
	}
	return 1
}
