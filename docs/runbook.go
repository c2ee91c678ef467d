// Package docs holds the runbook's text for the lab, which runs its
// commands as they are written (lab.RunbookStep): a command on the page
// that no longer works fails a test.
package docs

import _ "embed"

// Runbook is runbook.md.
//
//go:embed runbook.md
var Runbook string
