package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// deriveUUID makes a stable RFC 4122-shaped UUID (version 8, "custom") from
// its parts, so a sim node keeps its GPU and MIG identities across restarts:
// Nomad tracks devices and allocations by these IDs.
func deriveUUID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

func gpuUUID(system, seed string, index int) string {
	return "GPU-" + deriveUUID("nomad-gpu-sim/gpu", system, seed, fmt.Sprint(index))
}

func migUUID(system, seed string, index int, profile string, start uint32) string {
	return "MIG-" + deriveUUID("nomad-gpu-sim/mig", system, seed, fmt.Sprint(index), profile, fmt.Sprint(start))
}
