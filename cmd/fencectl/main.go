// Command fencectl is Fencegate's command line for people and operators:
// leases, fenced object writes and API calls, receipts and unknown outcomes,
// and admin verbs. Readable output by default, --json for scripts; errors
// print the problem's code and what to do, and exit with a status saying
// what happened (errors.go: 1 refused, 2 usage, 3 outcome unknown, 4 local).
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
