// Command cgohelper confines itself with RestrictThread in a binary built
// with or without cgo, then execs itself to show the domain carries over.
// TestCgoModes builds and runs it; it is not part of any build.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/nomad-gpu/nomad-gpu/driver/landlock"
)

func main() {
	root := os.Args[2]
	allowed := filepath.Join(root, "ro", "file")
	denied := filepath.Join(root, "none", "secret")
	if os.Args[1] == "exec" {
		fmt.Printf("exec: allowed=%s denied=%s\n", result(allowed), result(denied))
		return
	}
	runtime.LockOSThread()
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	_, err = landlock.RestrictThread([]landlock.Rule{
		{Path: filepath.Join(root, "ro"), Access: landlock.Read},
		{Path: filepath.Dir(self), Access: landlock.Read | landlock.Exec},
		{Path: "/usr/lib", Access: landlock.Read | landlock.Exec},
		{Path: "/lib64", Access: landlock.Read | landlock.Exec},
		{Path: "/etc/ld.so.cache", Access: landlock.Read},
	}, landlock.Options{ScopeSignals: true})
	if err != nil {
		fail(err)
	}
	other := make(chan string)
	go func() {
		runtime.LockOSThread()
		other <- result(denied)
	}()
	fmt.Printf("cgo=%v thread: allowed=%s denied=%s other-thread-denied=%s\n", cgo, result(allowed), result(denied), <-other)
	os.Stdout.Sync()
	fail(syscall.Exec(self, []string{self, "exec", root}, os.Environ()))
}

func result(path string) string {
	f, err := os.Open(path)
	if err == nil {
		f.Close()
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cgohelper:", err)
	os.Exit(1)
}
