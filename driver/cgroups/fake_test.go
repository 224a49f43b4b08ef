package cgroups

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Tests in this file run against fake cgroup trees in a temp dir, so they
// need no privileges; they must not use t.Parallel because they swap the
// package's filesystem root.

// fakeTree points the package at a temp dir holding files (path -> content;
// a path ending in "/" is an empty directory, "->target" a symlink).
func fakeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		switch {
		case strings.HasSuffix(p, "/"):
			must(t, os.MkdirAll(full, 0o755))
		case strings.HasPrefix(content, "->"):
			must(t, os.MkdirAll(filepath.Dir(full), 0o755))
			must(t, os.Symlink(strings.TrimPrefix(content, "->"), full))
		default:
			must(t, os.MkdirAll(filepath.Dir(full), 0o755))
			must(t, os.WriteFile(full, []byte(content), 0o644))
		}
	}
	setRoot(t, root)
	return root
}

func setRoot(t *testing.T, root string) {
	t.Helper()
	old := fsRoot
	fsRoot = root
	t.Cleanup(func() { fsRoot = old })
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readT(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestSharesToWeight(t *testing.T) {
	for _, tc := range []struct{ shares, weight int64 }{
		{0, 0},
		{-5, 0},
		{1, 1},
		{2, 1},
		{3, 1},
		{28, 1},    // (26*9999)/262142 = 0.99
		{29, 2},    // (27*9999)/262142 = 1.03
		{100, 4},   // Nomad's minimum cpu in a job
		{1024, 39}, // the v1 default does not map to the v2 default of 100
		{2600, 100},
		{262144, 10000},
		{1 << 40, 10000},
	} {
		if got := sharesToWeight(tc.shares); got != tc.weight {
			t.Errorf("sharesToWeight(%d) = %d, want %d", tc.shares, got, tc.weight)
		}
	}
}

func TestParseKV(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		want map[string]uint64
	}{
		{"cpuacct.stat", "user 253\nsystem 41\n", map[string]uint64{"user": 253, "system": 41}},
		{"v1 oom_control 4.13+", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", map[string]uint64{"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 3}},
		{"v2 memory.events", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n", map[string]uint64{"low": 0, "high": 0, "max": 12, "oom": 1, "oom_kill": 1, "oom_group_kill": 0}},
		{"odd lines skipped", "a 1\nbroken\nb -2\nc 3 4\n\nd 18446744073709551615\n", map[string]uint64{"a": 1, "d": 18446744073709551615}},
		{"empty", "", map[string]uint64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseKV(tc.text)
			if len(got) != len(tc.want) {
				t.Fatalf("parseKV = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %d, want %d", k, got[k], v)
				}
			}
		})
	}
}

func TestParseUint(t *testing.T) {
	for _, tc := range []struct {
		text    string
		want    uint64
		wantErr bool
	}{
		{"0", 0, false},
		{"33554432", 33554432, false},
		{"max", ^uint64(0), false},
		{"-1", ^uint64(0), false},
		{"12abc", 0, true},
		{"", 0, true},
	} {
		got, err := parseUint("f", tc.text)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseUint(%q) = %d, %v; want %d, error %v", tc.text, got, err, tc.want, tc.wantErr)
		}
	}
}

// v1Tree is a v1 layout like a systemd host's: cpu and cpuacct co-mounted with
// per-controller symlinks.
func v1Tree(extra map[string]string) map[string]string {
	files := map[string]string{
		"cpu,cpuacct/cgroup.procs": "",
		"cpu,cpuacct/cpu.shares":   "1024",
		"cpu":                      "->cpu,cpuacct",
		"cpuacct":                  "->cpu,cpuacct",
		"memory/cgroup.procs":      "",
		"pids/cgroup.procs":        "",
		"freezer/cgroup.procs":     "",
		"cpuset/cgroup.procs":      "",
		"systemd/cgroup.procs":     "",
		"unified/cgroup.procs":     "",
	}
	for k, v := range extra {
		files[k] = v
	}
	return files
}

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  Version
		desc  string
	}{
		{"nothing mounted", map[string]string{"x/": ""}, None, "no cgroup filesystem mounted at "},
		{"v2", map[string]string{"cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n"}, V2, "cgroups v2: cpu, memory, pids, cpuset"},
		{"v2 without pids", map[string]string{"cgroup.controllers": "cpu memory\n"}, V2, "cgroups v2: cpu, memory (missing: pids, cpuset)"},
		{"v2 without memory", map[string]string{"cgroup.controllers": "cpu io pids\n"}, None, "lacks the memory controller"},
		{"v1 co-mounted", v1Tree(nil), V1, "cgroups v1: cpu, cpuacct, memory, pids, freezer, cpuset"},
		{"v1 separate mounts", map[string]string{
			"cpu/cgroup.procs": "", "cpuacct/cgroup.procs": "", "memory/cgroup.procs": "",
		}, V1, "cgroups v1: cpu, cpuacct, memory (missing: pids, freezer, cpuset, devices)"},
		{"v1 without memory", map[string]string{"cpu/cgroup.procs": "", "pids/cgroup.procs": ""}, None, "lacks the memory controller"},
		{"v1 dirs that are not cgroups", map[string]string{"cpu/": "", "memory/": ""}, None, "no cgroup filesystem mounted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakeTree(t, tc.files)
			v, desc := Describe()
			if v != tc.want || !strings.Contains(desc, tc.desc) {
				t.Errorf("Describe() = %v, %q; want %v, containing %q", v, desc, tc.want, tc.desc)
			}
			if Detect() != v {
				t.Errorf("Detect() = %v, Describe() = %v", Detect(), v)
			}
		})
	}
}

func TestDescribeReadOnly(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	root := fakeTree(t, map[string]string{"cgroup.controllers": "cpu memory"})
	must(t, os.Chmod(root, 0o555))
	t.Cleanup(func() { _ = os.Chmod(root, 0o755) })
	if v, desc := Describe(); v != None || !strings.Contains(desc, "not writable") {
		t.Errorf("Describe() = %v, %q; want none, not writable", v, desc)
	}
}

func TestCreateRejectsBadNames(t *testing.T) {
	fakeTree(t, map[string]string{"cgroup.controllers": "cpu memory"})
	for _, tc := range [][2]string{{"", "x"}, {"nomad-gpu", ""}, {"a/b", "x"}, {"nomad-gpu", ".."}, {"nomad-gpu", "alloc/task"}} {
		if _, err := Create(tc[0], tc[1], Limits{}); err == nil || !strings.Contains(err.Error(), "invalid group name") {
			t.Errorf("Create(%q, %q) error = %v, want invalid group name", tc[0], tc[1], err)
		}
	}
}

func TestStatsV1(t *testing.T) {
	g := "nomad-gpu/a.t"
	fakeTree(t, v1Tree(map[string]string{
		"cpu,cpuacct/" + g + "/cpu.shares":            "512",
		"cpu,cpuacct/" + g + "/cpuacct.usage":         "2500000000",
		"cpu,cpuacct/" + g + "/cpuacct.stat":          "user 200\nsystem 50\n",
		"cpu,cpuacct/" + g + "/cpu.stat":              "nr_periods 10\nnr_throttled 4\nthrottled_time 7000\n",
		"memory/" + g + "/memory.stat":                "cache 10\nrss 20\nswap 0\ntotal_cache 1000\ntotal_rss 2000\ntotal_swap 30\n",
		"memory/" + g + "/memory.usage_in_bytes":      "4096",
		"memory/" + g + "/memory.max_usage_in_bytes":  "8192",
		"memory/" + g + "/memory.kmem.usage_in_bytes": "512",
	}))
	grp, err := Open([]string{filepath.Join(fsRoot, "cpu", g), filepath.Join(fsRoot, "memory", g)})
	if err != nil {
		t.Fatal(err)
	}
	if grp.Version() != V1 || grp.dir("cpuacct") == "" || grp.dir("cpuacct") != grp.dir("cpu") {
		t.Fatalf("Open: version %v, dirs %v; want v1 with cpu and cpuacct sharing a dir", grp.Version(), grp.dirs)
	}
	if want := filepath.Join(fsRoot, "cpu,cpuacct", g); grp.Paths()[0] != want {
		t.Errorf("Paths()[0] = %s, want the symlink resolved to %s", grp.Paths()[0], want)
	}
	s, err := grp.Stats()
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{
		CPUUserNanos: 2e9, CPUSystemNanos: 5e8, CPUTotalNanos: 25e8,
		ThrottledPeriods: 4, ThrottledNanos: 7000,
		MemoryRSS: 2000, MemoryCache: 1000, MemorySwap: 30, MemoryUsage: 4096, MemoryMaxUsage: 8192, KernelUsage: 512,
		Measured: []string{"RSS", "Cache", "Swap", "Usage", "Max Usage", "Kernel Usage"},
	}
	if !statsEqual(s, want) {
		t.Errorf("Stats() =\n%+v\nwant\n%+v", s, want)
	}
}

func TestStatsV2(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra map[string]string
		want  Stats
	}{
		{"kernel 6.x", map[string]string{
			"memory.peak":         "9000",
			"memory.swap.current": "100",
		}, Stats{
			CPUUserNanos: 3e6, CPUSystemNanos: 1e6, CPUTotalNanos: 4e6, ThrottledPeriods: 2, ThrottledNanos: 5e6,
			MemoryRSS: 300, MemoryCache: 400, KernelUsage: 50, MemoryUsage: 800, MemoryMaxUsage: 9000, MemorySwap: 100,
			Measured: []string{"RSS", "Cache", "Kernel Usage", "Usage", "Max Usage", "Swap"},
		}},
		{"no peak, no swap accounting", nil, Stats{
			CPUUserNanos: 3e6, CPUSystemNanos: 1e6, CPUTotalNanos: 4e6, ThrottledPeriods: 2, ThrottledNanos: 5e6,
			MemoryRSS: 300, MemoryCache: 400, KernelUsage: 50, MemoryUsage: 800,
			Measured: []string{"RSS", "Cache", "Kernel Usage", "Usage"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := "nomad-gpu.slice/a.t.scope/"
			files := map[string]string{
				"cgroup.controllers":       "cpu memory pids",
				dir + "cgroup.controllers": "cpu memory pids",
				dir + "cpu.stat":           "usage_usec 4000\nuser_usec 3000\nsystem_usec 1000\nnr_periods 9\nnr_throttled 2\nthrottled_usec 5000\n",
				dir + "memory.stat":        "anon 300\nfile 400\nkernel 50\nslab 20\n",
				dir + "memory.current":     "800",
			}
			for k, v := range tc.extra {
				files[dir+k] = v
			}
			root := fakeTree(t, files)
			g, err := Open([]string{filepath.Join(root, dir)})
			if err != nil {
				t.Fatal(err)
			}
			s, err := g.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if !statsEqual(s, tc.want) {
				t.Errorf("Stats() =\n%+v\nwant\n%+v", s, tc.want)
			}
		})
	}
}

func statsEqual(a, b Stats) bool {
	return slices.Equal(a.Measured, b.Measured) &&
		a.CPUUserNanos == b.CPUUserNanos && a.CPUSystemNanos == b.CPUSystemNanos && a.CPUTotalNanos == b.CPUTotalNanos &&
		a.ThrottledPeriods == b.ThrottledPeriods && a.ThrottledNanos == b.ThrottledNanos &&
		a.MemoryRSS == b.MemoryRSS && a.MemoryCache == b.MemoryCache && a.MemoryUsage == b.MemoryUsage &&
		a.MemoryMaxUsage == b.MemoryMaxUsage && a.MemorySwap == b.MemorySwap && a.KernelUsage == b.KernelUsage
}

func TestStatsGone(t *testing.T) {
	root := fakeTree(t, map[string]string{"cgroup.controllers": "cpu memory", "g/": ""})
	g, err := Open([]string{filepath.Join(root, "g")})
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(filepath.Join(root, "g")))
	if _, err := g.Stats(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stats() on a removed group: %v, want ErrNotExist", err)
	}
	if _, err := Open([]string{filepath.Join(root, "g")}); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(root, "g")) {
		t.Errorf("Open of a removed group: %v, want ErrNotExist naming the path", err)
	}
}

func TestOOMKilled(t *testing.T) {
	const unlimited = "9223372036854771712"
	for _, tc := range []struct {
		name  string
		files map[string]string // relative to the group's memory dir
		want  bool
	}{
		{"v2 none", map[string]string{"memory.events": "low 0\nhigh 0\nmax 40\noom 0\noom_kill 0\n"}, false},
		{"v2 killed", map[string]string{"memory.events": "low 0\nhigh 0\nmax 40\noom 1\noom_kill 1\n"}, true},
		{"v2 killed in a sub-group, local events", map[string]string{
			"memory.events": "oom 0\noom_kill 0\n", "sub/memory.events": "oom 1\noom_kill 2\n"}, true},
		{"v1 none", map[string]string{"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"}, false},
		{"v1 killed", map[string]string{"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"}, true},
		{"v1 killed in a sub-group", map[string]string{
			"memory.oom_control":     "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
			"sub/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"}, true},
		{"v1 counter says no despite failcnt", map[string]string{
			"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
			"memory.failcnt":     "12", "memory.max_usage_in_bytes": "33554432", "memory.limit_in_bytes": "33554432"}, false},
		{"old v1 under oom", map[string]string{"memory.oom_control": "oom_kill_disable 1\nunder_oom 1\n"}, true},
		{"old v1 limit hit", map[string]string{
			"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n",
			"memory.failcnt":     "12", "memory.max_usage_in_bytes": "33554432", "memory.limit_in_bytes": "33554432"}, true},
		{"old v1 reclaim only", map[string]string{
			"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n",
			"memory.failcnt":     "12", "memory.max_usage_in_bytes": "30000000", "memory.limit_in_bytes": "33554432"}, false},
		{"old v1 no limit", map[string]string{
			"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n",
			"memory.failcnt":     "0", "memory.max_usage_in_bytes": "30000000", "memory.limit_in_bytes": unlimited}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			var dir string
			if strings.HasPrefix(tc.name, "v2") {
				files["cgroup.controllers"] = "cpu memory"
				dir = "nomad-gpu.slice/x.scope"
			} else {
				files["memory/cgroup.procs"] = ""
				files["cpu/cgroup.procs"] = ""
				dir = "memory/nomad-gpu/x"
			}
			for k, v := range tc.files {
				files[dir+"/"+k] = v
			}
			root := fakeTree(t, files)
			g, err := Open([]string{filepath.Join(root, dir)})
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.OOMKilled()
			if err != nil || got != tc.want {
				t.Errorf("OOMKilled() = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestOOMKilledMissingFile(t *testing.T) {
	root := fakeTree(t, map[string]string{"cgroup.controllers": "cpu memory", "g/": ""})
	g, err := Open([]string{filepath.Join(root, "g")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.OOMKilled(); err == nil || !strings.Contains(err.Error(), filepath.Join(root, "g", "memory.events")) {
		t.Errorf("OOMKilled() error = %v, want one naming memory.events", err)
	}
}

// fakeV2Kernel makes mkdir and rmdir behave like cgroupfs v2 on a plain
// directory: a new group gets the control files of the controllers its
// parent delegates, and rmdir removes them with the directory.
func fakeV2Kernel(t *testing.T) {
	t.Helper()
	oldMk, oldRm := mkdirFn, rmdirFn
	t.Cleanup(func() { mkdirFn, rmdirFn = oldMk, oldRm })
	mkdirFn = func(path string) error {
		if err := os.Mkdir(path, 0o755); err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(filepath.Dir(path), "cgroup.subtree_control"))
		if err != nil {
			return err
		}
		var ctrls []string
		for _, f := range strings.Fields(string(b)) {
			ctrls = append(ctrls, strings.TrimPrefix(f, "+"))
		}
		files := map[string]string{
			"cgroup.procs": "", "cgroup.controllers": strings.Join(ctrls, " "), "cgroup.subtree_control": "",
			"cgroup.events": "populated 0\nfrozen 0\n", "cgroup.freeze": "0", "cgroup.kill": "",
			"cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
		}
		for _, c := range ctrls {
			switch c {
			case "cpu":
				files["cpu.weight"] = "100"
			case "memory":
				files["memory.max"], files["memory.low"], files["memory.current"] = "max", "0", "0"
				files["memory.events"] = "oom 0\noom_kill 0\n"
				files["memory.stat"] = "anon 0\nfile 0\n"
			case "pids":
				files["pids.max"] = "max"
			case "cpuset":
				files["cpuset.cpus"] = ""
			}
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(path, name), []byte(content), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	rmdirFn = os.RemoveAll
}

// The fake v2 kernel only remembers the last "+ctrl" written to a
// cgroup.subtree_control, so it delegates whatever the root already had
// enabled plus the last one; the root here starts with all of them so the
// group gets every controller.
func TestCreateV2Fake(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"cgroup.controllers":     "cpuset cpu io memory pids",
		"cgroup.subtree_control": "cpuset cpu io memory pids",
	})
	fakeV2Kernel(t)
	slice := filepath.Join(root, "nomad-gpu.slice")
	must(t, os.Mkdir(slice, 0o755))
	must(t, os.WriteFile(filepath.Join(slice, "cgroup.subtree_control"), []byte("cpuset cpu io memory pids"), 0o644))

	dir := filepath.Join(slice, "alloc1.web.scope")
	for _, tc := range []struct {
		name   string
		limits Limits
		want   map[string]string
	}{
		{"full", Limits{CPUShares: 1024, MemoryLimitBytes: 64 << 20, MemorySoftBytes: 32 << 20, CpusetCpus: "2-3", PidsMax: 64},
			map[string]string{"cpu.weight": "39", "memory.max": "67108864", "memory.low": "33554432", "cpuset.cpus": "2-3", "pids.max": "64"}},
		{"reused with no limits", Limits{},
			map[string]string{"cpu.weight": "100", "memory.max": "max", "memory.low": "0", "cpuset.cpus": "", "pids.max": "max"}},
		{"clamped", Limits{CPUShares: 1 << 30},
			map[string]string{"cpu.weight": "10000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Create("nomad-gpu", "alloc1.web", tc.limits)
			if err != nil {
				t.Fatal(err)
			}
			if g.Version() != V2 || !slices.Equal(g.Paths(), []string{dir}) {
				t.Fatalf("Create: %v %v, want v2 at %s", g.Version(), g.Paths(), dir)
			}
			if pf := g.ProcsFiles(); !slices.Equal(pf, []string{filepath.Join(dir, "cgroup.procs")}) {
				t.Errorf("ProcsFiles() = %v", pf)
			}
			for f, v := range tc.want {
				if got := readT(t, filepath.Join(dir, f)); got != v {
					t.Errorf("%s = %q, want %q", f, got, v)
				}
			}
		})
	}
	// Controllers already delegated are not written again.
	if got := readT(t, filepath.Join(root, "cgroup.subtree_control")); got != "cpuset cpu io memory pids" {
		t.Errorf("root cgroup.subtree_control rewritten to %q", got)
	}

	g, err := Open([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if killed, err := g.OOMKilled(); err != nil || killed {
		t.Errorf("OOMKilled() = %v, %v on a fresh group", killed, err)
	}
	// A task that made a sub-group of its own must not block Destroy.
	must(t, mkdirFn(filepath.Join(dir, "inner")))
	for range 2 {
		if err := g.Destroy(); err != nil {
			t.Fatalf("Destroy() = %v", err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Destroy, %s: %v", dir, err)
	}
	if _, err := os.Stat(slice); err != nil {
		t.Errorf("Destroy removed the shared slice: %v", err)
	}
}

func TestCreateV2FakeEnablesControllers(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"cgroup.controllers":     "cpuset cpu io memory pids",
		"cgroup.subtree_control": "memory pids", // systemd's usual default
	})
	fakeV2Kernel(t)
	// With the fake only remembering the last write, the group gets just
	// cpuset: Create must notice cpu and memory are missing and say so.
	_, err := Create("nomad-gpu", "a.t", Limits{})
	if err == nil || !strings.Contains(err.Error(), "lacks the cpu controller needed for cpu.weight") {
		t.Fatalf("Create() error = %v, want it to name the missing cpu controller", err)
	}
	if got := readT(t, filepath.Join(root, "cgroup.subtree_control")); got != "+cpuset" {
		t.Errorf("root cgroup.subtree_control = %q, want the last enabled controller (+cpuset)", got)
	}
}

func TestCreateV2MissingController(t *testing.T) {
	fakeTree(t, map[string]string{
		"cgroup.controllers":                     "cpu memory",
		"cgroup.subtree_control":                 "cpu memory",
		"nomad-gpu.slice/cgroup.subtree_control": "cpu memory",
	})
	fakeV2Kernel(t)
	for _, tc := range []struct {
		limits Limits
		want   string
	}{
		{Limits{PidsMax: 10}, "needs the pids controller"},
		{Limits{CpusetCpus: "0"}, "needs the cpuset controller"},
	} {
		if _, err := Create("nomad-gpu", "a.t", tc.limits); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Create(%+v) error = %v, want %q", tc.limits, err, tc.want)
		}
	}
	if _, err := Create("nomad-gpu", "a.t", Limits{CPUShares: 100, MemoryLimitBytes: 1 << 30}); err != nil {
		t.Errorf("Create without pids/cpuset limits: %v", err)
	}
}

// RaiseCPUWeight lifts a small weight to the kernel's default and leaves
// a larger one alone, under either hierarchy.
func TestRaiseCPUWeight(t *testing.T) {
	for _, tc := range []struct {
		name      string
		v1        bool
		cur, want string
	}{
		{"v1: 10 MHz asked", true, "10", "1024"},
		{"v1: 4000 MHz asked", true, "4000", "4000"},
		{"v2: 10 MHz asked", false, "1", "100"},
		{"v2: 4000 MHz asked", false, "155", "155"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var grp *Group
			var file string
			if tc.v1 {
				g := "nomad-gpu/a.t"
				fakeTree(t, v1Tree(map[string]string{"cpu,cpuacct/" + g + "/cpu.shares": tc.cur}))
				file = filepath.Join(fsRoot, "cpu,cpuacct", g, "cpu.shares")
				var err error
				if grp, err = Open([]string{filepath.Join(fsRoot, "cpu", g)}); err != nil {
					t.Fatal(err)
				}
			} else {
				dir := "nomad-gpu.slice/a.t.scope/"
				root := fakeTree(t, map[string]string{"cgroup.controllers": "cpu memory", dir + "cgroup.controllers": "cpu memory", dir + "cpu.weight": tc.cur})
				file = filepath.Join(root, dir, "cpu.weight")
				var err error
				if grp, err = Open([]string{filepath.Join(root, dir)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := grp.RaiseCPUWeight(); err != nil {
				t.Fatal(err)
			}
			if got := readT(t, file); got != tc.want {
				t.Errorf("%s = %s, want %s", filepath.Base(file), got, tc.want)
			}
		})
	}
}
