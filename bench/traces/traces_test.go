package traces

import (
	"bufio"
	"testing"
)

func TestPhillyIsTheWholeExtract(t *testing.T) {
	r := Philly()
	defer r.Close()
	sc := bufio.NewScanner(r)
	rows := -1 // the header
	for sc.Scan() {
		if rows == -1 && sc.Text() != "timestamp,duration,num_gpus,gpu_time,cluster" {
			t.Fatalf("header %q", sc.Text())
		}
		if sc.Text() != "" {
			rows++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rows != 82247 {
		t.Errorf("%d rows; the extract has 82,247", rows)
	}
}
