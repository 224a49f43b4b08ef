package harness

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-gpu/nomad-gpu/bench/tracereplay"
	"github.com/nomad-gpu/nomad-gpu/contract"
	"github.com/nomad-gpu/nomad-gpu/e2e/cluster"
)

// The trace replay's task, shared by its real engine and the e2e suite's
// checkpoint stress test, which stops it as a replay would, only more
// often.

// replayScript is the task of a replayed job: it works for WORK ms in all
// under sim-load, resuming from its checkpoint's count when it has one,
// and on the checkpoint signal commits the count of ms done so far. Its
// work done, it commits the whole count, as a training job saves its
// final weights (seen in a replay: Nomad evicted an allocation whose task
// had just exited, and placed a replacement, which without that commit
// redid the whole job; with it, the replacement restores the end and
// exits). It logs restored=, committed=, stopped= and finished= with that
// count.
//
// The checkpoint signal (SIGUSR1) goes to the task's whole process group
// and may come at any moment, a preemption following its placement at
// once included, and its default action is to terminate. The driver
// sends it only once the shell handles it; the shell traps it first of
// all (a request before it can commit is answered once it can), reads its
// checkpoint with a builtin, and every child it forks may die of it: date
// is asked again, and the work loop sleeps until the work is done, however
// often its sleep is killed. (Otherwise a request in the first
// milliseconds would kill the task before it logs restored=, and every
// later one its sleep, so that it would end as if done right after its
// commit and never log stopped=: no commit-to-exit gap would be
// measured.) The driver
// stops the task as soon as it sees the commit marker, which may be before
// the line after it runs: the stop's trap logs the commit marked (m) that
// ck had no time to log. It is quoted into the jobspec's HCL: no "${" or
// "%{" in it.
const replayScript = `trap 'asked=1' USR1
done=0
if [ -n "$NOMAD_GPU_RESTORE_DIR" ] && [ -f "$NOMAD_GPU_RESTORE_DIR/done" ]; then read -r done < "$NOMAD_GPU_RESTORE_DIR/done"; fi
echo "restored=$done"
now() { t=; while [ -z "$t" ]; do t=$(date +%s%3N); done; }
now; start=$t
sofar() { now; d=$((done + t - start)); }
ck() { sofar; echo $d > "$NOMAD_GPU_CHECKPOINT_DIR/done"; m=$d; : > "$NOMAD_GPU_CHECKPOINT_COMMIT"; echo "committed=$m"; m=; }
trap ck USR1
trap 'sofar; [ -z "$m" ] || echo "committed=$m"; echo "stopped=$d"; exit 0' INT TERM
[ -z "$asked" ] || ck
left=$((WORK - done))
if [ $left -gt 0 ]; then
  "$CLI" sim-load --util UTIL --duration "$left"ms &
  while sofar; [ $d -lt WORK ]; do
    l=$((WORK - d))
    sleep $((l / 1000)).$((l % 1000 / 100))$((l % 100 / 10))$((l % 10)) & s=$!
    while kill -0 $s 2>/dev/null; do wait $s; done
  done
fi
[ -z "$NOMAD_GPU_CHECKPOINT_COMMIT" ] || ck; sofar; echo "finished=$d"`

// ReplayTask is replayScript for work ms at util percent, run by cli.
func ReplayTask(work time.Duration, util float64, cli string) string {
	return strings.NewReplacer("WORK", strconv.FormatInt(work.Milliseconds(), 10),
		"UTIL", strconv.FormatFloat(util, 'f', 0, 64), `"$CLI"`, "'"+cli+"'").Replace(replayScript)
}

// IncompleteEvidence is an incomplete record's: the task's log and
// events, and the lines of its node's agent log naming the allocation
// (none when its node is gone).
func IncompleteEvidence(c *cluster.Cluster, job, allocID, node, logs string) tracereplay.IncompleteRecord {
	rec := tracereplay.IncompleteRecord{Job: job, Alloc: allocID, Node: node, TaskLog: logs}
	if a, _, err := c.API().Allocations().Info(allocID, nil); err == nil && a.TaskStates["t"] != nil {
		var events []string
		for _, e := range a.TaskStates["t"].Events {
			events = append(events, fmt.Sprintf("%s %s: %s", time.Unix(0, e.Time).UTC().Format("15:04:05.000"), e.Type, e.DisplayMessage))
			if o := e.Details[contract.EventDetailCheckpoint]; o != "" {
				rec.Checkpoint = append(rec.Checkpoint, o)
			}
			if e.Type == api.TaskTerminated {
				rec.KilledBy = e.Signal
			}
		}
		rec.Events = strings.Join(events, "\n")
	}
	for _, agent := range c.Clients() {
		if agent.Name() != node {
			continue
		}
		var lines []string
		for _, l := range strings.Split(agent.CurrentLog(), "\n") {
			if strings.Contains(l, allocID) {
				lines = append(lines, l)
			}
		}
		rec.AgentLog = strings.Join(lines, "\n")
	}
	return rec
}

// LogValue is the last key=N a task logged; ok is false if none.
func LogValue(logs, key string) (n int, ok bool) {
	re := regexp.MustCompile(`(?m)^` + key + `=(\d+)`)
	ms := re.FindAllStringSubmatch(logs, -1)
	if len(ms) == 0 {
		return -1, false
	}
	n, _ = strconv.Atoi(ms[len(ms)-1][1])
	return n, true
}

// ReplayControllerTick is the controller's -tick in a replay: short, so
// that its reaction stays under the model's Policy.ProtectReaction (which
// BenchmarkProtectionReaction measures).
const ReplayControllerTick = 200 * time.Millisecond
