// Command fencectl is Fencegate's command line for people and operators:
// leases, fenced object writes and API calls, receipts and unknown outcomes,
// and admin verbs. Readable output by default, --json for scripts; errors
// print the problem's code and what to do, and exit 1.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
