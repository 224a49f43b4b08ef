//go:build cgo

package main

// Linking C makes the Go runtime start its threads through pthread_create,
// as in the plugin binary.

// static int one(void) { return 1; }
import "C"

var cgo = C.one() == 1
