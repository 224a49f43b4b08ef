package contract

import (
	"strconv"
	"strings"
)

// MIGWeight is a MIG instance of profile in GPU-equivalents: its compute
// slices over 7 ("3g.40gb": 3/7; the compute instance "1c.3g.40gb": 1/7),
// 1 when profile names no slices. The controller's planner and the read
// model weigh instances by it.
func MIGWeight(profile string) float64 {
	base, _, _ := strings.Cut(profile, "+")
	base, _, _ = strings.Cut(base, "-")
	gs := 0
	for _, part := range strings.Split(base, ".") {
		n, err := strconv.Atoi(strings.TrimRight(part, "cg"))
		if err != nil || n < 1 || n > 7 || len(part) < 2 {
			continue
		}
		switch part[len(part)-1] {
		case 'c': // a compute instance: its own slices
			return float64(n) / 7
		case 'g':
			gs = n
		}
	}
	if gs == 0 {
		return 1
	}
	return float64(gs) / 7
}
