package queues

// BenchmarkOrder: the controller's ordering of 10,000 waiting jobs over
// 50 queues in one cohort, with their standings from each queue's use:
// what every round does before it admits. The target (issue 38) is 50 ms
// a round.
//
//	go test -run '^$' -bench Order -benchmem ./controller/queues/

import (
	"fmt"
	"testing"
	"time"
)

func BenchmarkOrder(b *testing.B) {
	const queues, jobs = 50, 10_000
	cfg := Config{Cohorts: []string{"all"}, HalfLife: DefaultHalfLife}
	hours, active := map[string]float64{}, map[string]bool{}
	for i := range queues {
		name := fmt.Sprintf("q%02d", i)
		cfg.Queues = append(cfg.Queues, Queue{Name: name, Namespaces: []string{name}, Nominal: 8, BorrowingLimit: Unlimited,
			LendingLimit: 8, Weight: float64(1 + i%4), Cohort: "all"})
		hours[name], active[name] = float64(i*7%13), true
	}
	t0 := time.Unix(1_000_000, 0)
	ws := make([]Waiting, jobs)
	for i := range ws {
		q := fmt.Sprintf("q%02d", i*31%queues)
		ws[i] = Waiting{Namespace: q, ID: fmt.Sprintf("job-%05d", i), Queue: q, Priority: 50 + 10*(i%3),
			Submitted: t0.Add(time.Duration(i*7919%jobs) * time.Second)}
		if i%10 == 0 {
			ws[i].Deadline = t0.Add(time.Duration(i) * time.Minute)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if got := Order(ws, Standings(cfg, hours, active)); len(got) != jobs {
			b.Fatalf("%d ordered, want %d", len(got), jobs)
		}
	}
}
