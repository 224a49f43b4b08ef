package supervisor

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nomad-gpu/nomad-gpu/driver/landlock"
)

// execError is why the command at path (cmd, as given) could not be
// executed. Where Landlock refused it the kernel says only "permission
// denied", which reads like a file mode problem; this names the file the
// task may not execute and the config that would allow it.
func execError(cmd, path string, err error, iso Isolation) string {
	msg := fmt.Sprintf("command %q: %v", cmd, errText(err))
	if !iso.LandlockOn || !errors.Is(err, syscall.EACCES) {
		return msg
	}
	// access(2) checks the file modes, the mount's noexec and the search
	// path as the task's user, but not Landlock: if it allows what exec
	// refused, Landlock refused it.
	if unix.Access(path, unix.X_OK) != nil {
		return msg
	}
	return msg + ": " + landlockRefusal(path, iso.Landlock)
}

// landlockRefusal says which file Landlock would not let the task execute
// (exec needs read and execute rights): the command, else its #!
// interpreter or dynamic loader, where that can be read.
func landlockRefusal(path string, rules []landlock.Rule) string {
	refused := path
	if landlock.Allows(rules, path, landlock.Read|landlock.Exec) {
		refused = interpreter(path)
		if refused == "" || landlock.Allows(rules, refused, landlock.Read|landlock.Exec) {
			return fmt.Sprintf("Landlock refused it: the task may execute %s, but not a program it needs to start (its #! interpreter or dynamic loader); %s",
				path, howToAllow("rx:<that program's directory>"))
		}
	}
	return fmt.Sprintf("Landlock refused it: no unveil rule lets the task read and execute %s; %s", refused, howToAllow("rx:"+filepath.Dir(refused)))
}

func howToAllow(rule string) string {
	return fmt.Sprintf("allow it with %q in the plugin config's isolation.unveil_paths, or in the task's config.unveil where the plugin config sets isolation.unveil_by_task = true", rule)
}

// interpreter is the program the kernel runs to execute path: its #!
// interpreter or its ELF dynamic loader; "" for neither, or when path
// cannot be read (Landlock may refuse that too).
func interpreter(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := f.ReadAt(head, 0)
	if line, ok := bytes.CutPrefix(head[:n], []byte("#!")); ok {
		line, _, _ = bytes.Cut(line, []byte("\n"))
		if fields := strings.Fields(string(line)); len(fields) > 0 {
			return fields[0]
		}
		return ""
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				return string(bytes.TrimRight(b, "\x00"))
			}
		}
	}
	return ""
}
