// Package docscheck holds the repository's checks on itself that no
// package owns: README.md and docs/ link only to what exists, and no
// tracked file names a path outside the clone (another machine's
// directories, or the sibling folders of the tree it was written in), so a
// fresh clone has everything its docs, tests and benchmarks name.
package docscheck
