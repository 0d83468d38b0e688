// Package testrun is `keep test`: it runs a workflow's test file (a
// script, `export default Keep.test({ workflow, cases })`) case by case,
// each on the real engine over a temporary SQLite store, with every
// connector replaced by a fake built from the connectors' own
// declarations (connector/builtin): reads answer from the case's table,
// writes are recorded and reconcile finds what was applied, faults follow
// connector.FaultClasses. It then checks the case's expectations against
// what keep recorded (package report) and what the fakes received.
package testrun
