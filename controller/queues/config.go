package queues

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Config is the controller's queue file, checked.
type Config struct {
	Queues  []Queue
	Cohorts []string
	// HalfLife is how long use takes to decay by half (fair_share
	// { half_life }); ReclaimWithin the bound on taking borrowed work
	// back (reclaim { within }).
	HalfLife, ReclaimWithin time.Duration
}

// Queue is one team's queue.
type Queue struct {
	Name string
	// Namespaces are the namespaces whose work is the queue's; NodePool,
	// when set, limits it to work in that pool.
	Namespaces []string
	NodePool   string
	// Nominal is its quota in GPU-equivalents. BorrowingLimit is the most
	// it may use beyond nominal (Unlimited: what its cohort lends);
	// LendingLimit the most of its nominal it lends (Nominal: all of it).
	Nominal, BorrowingLimit, LendingLimit float64
	// Weight is its fair-share weight; Cohort the cohort it lends to and
	// borrows from ("" for none).
	Weight float64
	Cohort string
}

// Unlimited is a borrowing limit that is not set.
var Unlimited = math.Inf(1)

// Defaults of the file's optional keys.
const (
	DefaultHalfLife      = 7 * 24 * time.Hour // Slurm's PriorityDecayHalfLife
	DefaultReclaimWithin = time.Minute
	DefaultWeight        = 1.0
)

// Bounds of the durations.
const (
	minHalfLife, maxHalfLife           = time.Minute, 365 * 24 * time.Hour
	minReclaimWithin, maxReclaimWithin = 10 * time.Second, time.Hour
)

// file is the HCL as written: pointers tell an unset key from a zero.
type file struct {
	FairShare *struct {
		HalfLife *string `hcl:"half_life,optional"`
	} `hcl:"fair_share,block"`
	Reclaim *struct {
		Within *string `hcl:"within,optional"`
	} `hcl:"reclaim,block"`
	Cohorts []struct {
		Name string `hcl:"name,label"`
	} `hcl:"cohort,block"`
	Queues []queueBlock `hcl:"queue,block"`
}

type queueBlock struct {
	Name           string   `hcl:"name,label"`
	Namespaces     []string `hcl:"namespaces"`
	NodePool       *string  `hcl:"node_pool,optional"`
	Nominal        float64  `hcl:"nominal"`
	BorrowingLimit *float64 `hcl:"borrowing_limit,optional"`
	LendingLimit   *float64 `hcl:"lending_limit,optional"`
	Weight         *float64 `hcl:"weight,optional"`
	Cohort         *string  `hcl:"cohort,optional"`
}

// Parse reads a queue file. Its error names every key that is wrong
// (the file, line and key path) and what is allowed, one a line.
func Parse(name string, src []byte) (Config, error) {
	f, diags := hclparse.NewParser().ParseHCL(src, name)
	if diags.HasErrors() {
		return Config{}, diagError(diags, nil)
	}
	var raw file
	if diags := gohcl.DecodeBody(f.Body, nil, &raw); diags.HasErrors() {
		return Config{}, diagError(diags, f.Body)
	}
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, a...)...))
	}
	cfg := Config{HalfLife: DefaultHalfLife, ReclaimWithin: DefaultReclaimWithin}
	if raw.FairShare != nil && raw.FairShare.HalfLife != nil {
		cfg.HalfLife = duration(bad, "fair_share.half_life", *raw.FairShare.HalfLife, minHalfLife, maxHalfLife)
	}
	if raw.Reclaim != nil && raw.Reclaim.Within != nil {
		cfg.ReclaimWithin = duration(bad, "reclaim.within", *raw.Reclaim.Within, minReclaimWithin, maxReclaimWithin)
	}
	for _, c := range raw.Cohorts {
		if slices.Contains(cfg.Cohorts, c.Name) {
			bad("cohort %q: declared twice; allowed: one block a cohort", c.Name)
		}
		cfg.Cohorts = append(cfg.Cohorts, c.Name)
	}
	if len(raw.Queues) == 0 {
		bad("queue: none; allowed: one or more queue blocks")
	}
	for _, b := range raw.Queues {
		if slices.ContainsFunc(cfg.Queues, func(q Queue) bool { return q.Name == b.Name }) {
			bad("queue %q: declared twice; allowed: one block a queue", b.Name)
			continue
		}
		cfg.Queues = append(cfg.Queues, b.check(bad, cfg.Cohorts))
	}
	checkOwners(bad, cfg.Queues)
	return cfg, errors.Join(errs...)
}

// check turns a queue block into a Queue, calling bad for each wrong key.
func (b queueBlock) check(bad func(string, ...any), cohorts []string) Queue {
	q := Queue{Name: b.Name, Namespaces: b.Namespaces, NodePool: deref(b.NodePool), Nominal: b.Nominal,
		BorrowingLimit: Unlimited, LendingLimit: b.Nominal, Weight: DefaultWeight, Cohort: deref(b.Cohort)}
	at := fmt.Sprintf("queue %q", b.Name)
	if b.Name == "" {
		bad("queue: an empty name; allowed: a name")
	}
	if len(b.Namespaces) == 0 || slices.Contains(b.Namespaces, "") {
		bad("%s: namespaces: %q; allowed: one or more namespace names", at, b.Namespaces)
	}
	if b.NodePool != nil && *b.NodePool == "" {
		bad("%s: node_pool: empty; allowed: a node pool's name, or no node_pool for every pool", at)
	}
	if !finite(b.Nominal) || b.Nominal < 0 {
		bad("%s: nominal: %g; allowed: 0 or more GPU-equivalents", at, b.Nominal)
	}
	if b.Weight != nil {
		q.Weight = *b.Weight
		if !finite(q.Weight) || q.Weight <= 0 {
			bad("%s: weight: %g; allowed: more than 0", at, q.Weight)
		}
	}
	if q.Cohort != "" && !slices.Contains(cohorts, q.Cohort) {
		bad("%s: cohort: %q is no cohort block; allowed: %s", at, q.Cohort, oneOf(cohorts, "a cohort declared with a cohort block"))
	}
	if b.BorrowingLimit != nil {
		q.BorrowingLimit = *b.BorrowingLimit
		switch {
		case q.Cohort == "":
			bad("%s: borrowing_limit: set without a cohort; allowed: only on a queue in a cohort", at)
		case !finite(q.BorrowingLimit) || q.BorrowingLimit < 0:
			bad("%s: borrowing_limit: %g; allowed: 0 or more GPU-equivalents, or unset for no limit", at, q.BorrowingLimit)
		}
	}
	if b.LendingLimit != nil {
		q.LendingLimit = *b.LendingLimit
		switch {
		case q.Cohort == "":
			bad("%s: lending_limit: set without a cohort; allowed: only on a queue in a cohort", at)
		case !finite(q.LendingLimit) || q.LendingLimit < 0 || q.LendingLimit > b.Nominal:
			bad("%s: lending_limit: %g; allowed: 0 to nominal (%g)", at, q.LendingLimit, b.Nominal)
		}
	}
	if q.Cohort == "" {
		q.LendingLimit = 0 // nobody to lend to
		q.BorrowingLimit = 0
	}
	return q
}

// checkOwners refuses a namespace (and pool) that two queues claim: its
// work would count twice.
func checkOwners(bad func(string, ...any), qs []Queue) {
	type owner struct{ ns, pool, queue string }
	var seen []owner
	for _, q := range qs {
		for _, ns := range q.Namespaces {
			for _, o := range seen {
				if o.ns == ns && (o.pool == q.NodePool || o.pool == "" || q.NodePool == "") {
					bad("queue %q: namespaces: %q is queue %q's already; allowed: each namespace (and node pool) in one queue", q.Name, ns, o.queue)
					break
				}
			}
			seen = append(seen, owner{ns, q.NodePool, q.Name})
		}
	}
}

func duration(bad func(string, ...any), key, s string, lo, hi time.Duration) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d < lo || d > hi {
		bad("%s: %q; allowed: a duration from %s to %s", key, s, lo, hi)
	}
	return d
}

// diagError is the parser's diagnostics, one a line: each names the file
// and line, and the key path where the diagnostic is about a value (HCL
// names the key itself only when it is unknown or missing).
func diagError(diags hcl.Diagnostics, body hcl.Body) error {
	var errs []error
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Error()
		if sb, ok := body.(*hclsyntax.Body); ok && d.Subject != nil {
			if key := keyAt(sb, *d.Subject, ""); key != "" {
				msg += " (" + key + ")"
			}
		}
		errs = append(errs, errors.New(msg))
	}
	return errors.Join(errs...)
}

// keyAt is the key path of the attribute whose value holds rng, as
// `queue "a".nominal`; "" when none does.
func keyAt(b *hclsyntax.Body, rng hcl.Range, at string) string {
	for name, a := range b.Attributes {
		if a.Expr.Range().Overlaps(rng) {
			return at + name
		}
	}
	for _, blk := range b.Blocks {
		path := blk.Type
		for _, l := range blk.Labels {
			path += fmt.Sprintf(" %q", l)
		}
		if key := keyAt(blk.Body, rng, at+path+"."); key != "" {
			return key
		}
	}
	return ""
}

func oneOf(names []string, none string) string {
	if len(names) == 0 {
		return none
	}
	return strings.Join(quoted(names), ", ")
}

func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%q", n)
	}
	return out
}

func finite(x float64) bool { return !math.IsInf(x, 0) && !math.IsNaN(x) }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
