// Package devscript holds the tests of internal/devscript/dev.sh, which `make dev`
// runs: they run the real make target and script against a stand-in nomad
// and controller, so they need neither Nomad nor a build.
package devscript
