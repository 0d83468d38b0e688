// Package apitype holds the API's shapes: every request the API takes and
// every answer it gives (the --json field names, a public contract that
// docs/api.md describes), one definition of each. The API and report fill
// them; apiclient, the CLI and the page decode the same JSON into them.
// A leaf: it imports keeptype only, so that a client of the API needs
// nothing of keep's machinery to read its answers.
package apitype
