package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strconv"
)

// Key names a task's checkpoints across its allocations: a replacement of
// a preempted, drained or rescheduled allocation has the same key, so it
// restores what its predecessor committed, on this node or on another that
// shares the store's root.
type Key struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Group     string `json:"group"`
	Task      string `json:"task"`
	// AllocIndex is the allocation's index in its group (NOMAD_ALLOC_INDEX),
	// which a replacement keeps: allocation IDs change, indexes do not.
	AllocIndex int `json:"alloc_index"`
}

// KeyDir is the key's directory,
// <root>/<namespace>/<job>/<group>/<task>/<alloc index>, each name encoded
// into exactly one path component, so that no name, whatever it holds,
// reaches outside root or into another key's directory:
//
//   - the bytes A-Z, a-z, 0-9, '_' and '-' are kept, and so is '.' except
//     as the first byte;
//   - every other byte (a leading '.', '/', NUL, '%', spaces, each byte of a
//     multi-byte UTF-8 character) becomes %XX, XX its value in upper-case
//     hex;
//   - the empty name becomes "%", which the rule above never produces;
//   - an encoding longer than 80 bytes is cut to at most its first 47
//     bytes, never inside a %XX, followed by '~' and the first 32 hex
//     digits of the SHA-256 of the whole name. '~' occurs in no uncut
//     encoding, so a cut name never equals an uncut one, and two names
//     that differ only past the cut differ in their hash.
//
// No component is "." or "..", none contains '/', none is longer than 80
// bytes, and distinct keys get distinct directories.
func (s *Store) KeyDir(k Key) string {
	return filepath.Join(s.root, encodeName(k.Namespace), encodeName(k.Job),
		encodeName(k.Group), encodeName(k.Task), encodeName(strconv.Itoa(k.AllocIndex)))
}

const (
	maxComponent = 80
	hashDigits   = 32
	hexUpper     = "0123456789ABCDEF"
)

func encodeName(name string) string {
	if name == "" {
		return "%"
	}
	b := make([]byte, 0, len(name))
	// cuts[i] is the length of b before the encoding of name[i]: the
	// places where a cut keeps every %XX whole.
	cuts := make([]int, 0, len(name))
	for i := 0; i < len(name); i++ {
		cuts = append(cuts, len(b))
		c := name[i]
		if plain(c) || (c == '.' && i > 0) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hexUpper[c>>4], hexUpper[c&15])
	}
	if len(b) <= maxComponent {
		return string(b)
	}
	limit := maxComponent - 1 - hashDigits
	n := 0
	for _, c := range cuts {
		if c > limit {
			break
		}
		n = c
	}
	sum := sha256.Sum256([]byte(name))
	return string(b[:n]) + "~" + hex.EncodeToString(sum[:])[:hashDigits]
}

func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// GenerationDir is where generation seq of key k lives, committed or not.
func (s *Store) GenerationDir(k Key, seq int) string {
	return filepath.Join(s.KeyDir(k), genName(seq))
}
