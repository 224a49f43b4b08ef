package driver

import (
	"fmt"
	"strconv"
	"strings"
)

// idRange is an inclusive range of user or group IDs.
type idRange struct{ lo, hi uint32 }

// parseIDRanges reads "0,10-20": IDs and ranges, comma-separated; "" is none.
func parseIDRanges(s string) ([]idRange, error) {
	var out []idRange
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		r, err := parseID32(lo)
		if err != nil {
			return nil, fmt.Errorf("%q: %v; want IDs and ranges such as \"0,10-20\"", part, err)
		}
		rng := idRange{r, r}
		if isRange {
			if rng.hi, err = parseID32(hi); err != nil {
				return nil, fmt.Errorf("%q: %v; want IDs and ranges such as \"0,10-20\"", part, err)
			}
			if rng.hi < rng.lo {
				return nil, fmt.Errorf("%q: the range ends before it starts", part)
			}
		}
		out = append(out, rng)
	}
	return out, nil
}

func parseID32(s string) (uint32, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not an ID", s)
	}
	return uint32(v), nil
}

func inRanges(rs []idRange, id uint32) bool {
	for _, r := range rs {
		if id >= r.lo && id <= r.hi {
			return true
		}
	}
	return false
}
