// Command kubectl-skewgate is the kubectl plugin `kubectl skewgate`: every
// control-plane node's skewgate at once, read through each one's secure
// admin listener with the operator's kubeconfig. It parses flags; the
// work is proxy/status's.
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

// Exit statuses, as --help states them.
const (
	exitOK       = 0
	exitFailed   = 1 // the pods could not be listed, or a node did not answer
	exitUsage    = 2 // the command line is wrong
	exitDegraded = 3 // every node answered, and some need a look
)

// exitError ends the command with code after printing what is wrong.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// execute runs one command line and returns the exit status.
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "kubectl skewgate:", err)
	var ee exitError
	if errors.As(err, &ee) {
		if ee.code == exitUsage {
			fmt.Fprintln(stderr, "Run 'kubectl skewgate --help' for usage.")
		}
		return ee.code
	}
	return exitFailed
}
