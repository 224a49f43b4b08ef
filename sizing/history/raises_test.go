package history

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// Raises survive a reopen, replace each other per job, and go when deleted.
func TestPriorityRaises(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	st, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1000, 0).UTC()
	for _, r := range []PriorityRaise{
		{Namespace: "default", Job: "b", Original: 30, Raised: 40, At: at},
		{Namespace: "default", Job: "a", Original: 30, Raised: 40, At: at},
		{Namespace: "default", Job: "a", Original: 30, Raised: 70, At: at.Add(time.Minute), Reason: "again"},
	} {
		if err := st.PutRaise(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutRaise(ctx, PriorityRaise{Job: "x"}); err == nil {
		t.Fatal("a raise without a namespace was stored")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	all, err := st.Raises(ctx)
	if err != nil || len(all) != 2 || all[0].Job != "a" || all[0].Raised != 70 || all[0].Original != 30 || !all[0].At.Equal(at.Add(time.Minute)) || all[1].Job != "b" {
		t.Fatalf("Raises = %+v, %v", all, err)
	}
	if err := st.DeleteRaise(ctx, "default", "a"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := st.Raise(ctx, "default", "a"); ok || err != nil {
		t.Fatalf("deleted raise still there: %v %v", ok, err)
	}
	if r, ok, err := st.Raise(ctx, "default", "b"); !ok || err != nil || r.Raised != 40 {
		t.Fatalf("Raise(b) = %+v %v %v", r, ok, err)
	}
}
