package checkpoint

import (
	"errors"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Markers tells the moment a task creates its commit marker, through
// inotify on the staging directories, so that a commit (and a stop waiting
// for it) does not wait for the next look. One inotify instance serves
// every run: the kernel allows a user only a few instances (128 by
// default) but many watches.
//
// inotify sees what this node's kernel does to a directory; a marker made
// by another node's kernel on a network filesystem is not seen, so callers
// keep looking for markers now and then as well.
type Markers struct {
	f  *os.File
	fd int // f's; f.Fd() would make f blocking, and Close could not end a Read

	mu      sync.Mutex
	closed  bool
	broken  bool // reading events failed: no watch reports anything
	watches map[int32][]*MarkerWatch
}

// MarkerWatch is one run's watch: C has a value after its task may have
// created its marker; Run.CommitRequested says whether it did.
type MarkerWatch struct {
	m   *Markers
	run *Run
	c   chan struct{}
	wd  int32 // -1 while inotify does not watch the staging directory
}

// NewMarkers opens the inotify instance. It fails where the kernel has no
// inotify or the user's instances are used up.
func NewMarkers() (*Markers, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	// Non-blocking, the file is read through Go's poller, so Close ends a
	// Read waiting for events.
	m := &Markers{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, watches: map[int32][]*MarkerWatch{}}
	go m.read()
	return m, nil
}

// Close stops every watch; their channels get no more values.
func (m *Markers) Close() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	// Under mu: no watch is added to or removed from a closed descriptor,
	// whose number may be another file's by then.
	m.closed = true
	return m.f.Close()
}

func (m *Markers) read() {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := m.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				// Not seen in practice; the runs fall back on looking.
				m.mu.Lock()
				m.broken = true
				m.mu.Unlock()
				m.notifyAll()
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				// Events were lost: every run looks again.
				m.notifyAll()
			case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 && cString(name) == CommitMarker:
				m.notify(ev.Wd)
			}
		}
	}
}

// cString is an inotify event's name, which is padded with NULs.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func (m *Markers) notify(wd int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.watches[wd] {
		w.poke()
	}
}

func (m *Markers) notifyAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ws := range m.watches {
		for _, w := range ws {
			w.poke()
		}
	}
}

// Watch starts watching r's staging directory. The watch is returned even
// where inotify cannot watch the directory; Armed says whether it does.
// The caller looks for a marker once after Watch returns: one created
// before it is not reported.
func (m *Markers) Watch(r *Run) *MarkerWatch {
	w := &MarkerWatch{m: m, run: r, c: make(chan struct{}, 1), wd: -1}
	if m != nil {
		w.Rearm()
	}
	return w
}

// C has a value after the task may have created its commit marker. It is
// nil for a watch of no Markers.
func (w *MarkerWatch) C() <-chan struct{} {
	if w == nil || w.m == nil {
		return nil
	}
	return w.c
}

func (w *MarkerWatch) poke() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Armed says whether inotify watches the staging directory.
func (w *MarkerWatch) Armed() bool {
	if w == nil || w.m == nil {
		return false
	}
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	return w.wd >= 0 && !w.m.broken
}

// Rearm watches the directory now at the run's staging path. A commit
// moves the staging directory, watch and all, into a generation and makes
// a fresh one at the same path, which needs a watch of its own. As after
// Watch, the caller looks for a marker once after Rearm returns. It
// reports whether the directory is watched.
func (w *MarkerWatch) Rearm() bool {
	if w == nil || w.m == nil {
		return false
	}
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	wd := -1
	if !m.closed && !m.broken {
		var err error
		wd, err = unix.InotifyAddWatch(m.fd, w.run.Staging,
			unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW)
		if err != nil {
			wd = -1
		}
	}
	if int32(wd) != w.wd {
		m.drop(w)
		w.wd = int32(wd)
		if wd >= 0 {
			m.watches[w.wd] = append(m.watches[w.wd], w)
		}
	}
	return wd >= 0 && !m.broken
}

// Close ends the watch.
func (w *MarkerWatch) Close() {
	if w == nil || w.m == nil {
		return
	}
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	w.m.drop(w)
	w.wd = -1
}

// drop takes w off its current inotify watch, and removes that watch when
// no other run shares it; m.mu is held.
func (m *Markers) drop(w *MarkerWatch) {
	if w.wd < 0 {
		return
	}
	ws := m.watches[w.wd]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) > 0 {
		m.watches[w.wd] = ws
		return
	}
	delete(m.watches, w.wd)
	if !m.closed {
		// The directory may be gone already (a pruned generation), which
		// removed the watch with it.
		unix.InotifyRmWatch(m.fd, uint32(w.wd))
	}
}
