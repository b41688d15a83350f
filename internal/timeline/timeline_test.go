package timeline

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"
)

func TestRingKeepsTheLastEvents(t *testing.T) {
	r := New(4)
	base := time.Unix(1000, 0)
	for i := range 6 {
		r.Add(Sync, base.Add(time.Duration(i)*time.Second), time.Millisecond, int64(i))
	}
	var got []int64
	for _, ev := range r.Since(base) {
		if ev.Kind == Sync {
			got = append(got, ev.N)
		}
	}
	if want := []int64{2, 3, 4, 5}; !equal(got, want) {
		t.Fatalf("events kept: %v, want %v (the last four, oldest first)", got, want)
	}
	got = got[:0]
	for _, ev := range r.Since(base.Add(4 * time.Second)) {
		if ev.Kind == Sync {
			got = append(got, ev.N)
		}
	}
	if want := []int64{4, 5}; !equal(got, want) {
		t.Fatalf("events since the fifth: %v, want %v", got, want)
	}
}

func TestBeginEndAndNil(t *testing.T) {
	var nilRec *Recorder
	nilRec.Add(Sync, time.Now(), 0, 0) // a nil recorder records nothing, and does not fail
	nilRec.Begin(Stall)
	nilRec.End(Stall, 0)
	if evs := nilRec.Since(time.Time{}); evs != nil {
		t.Fatalf("nil recorder: %v", evs)
	}
	r := New(8)
	r.End(Stall, 0) // no Begin: nothing
	r.Begin(Stall)
	r.End(Stall, 7)
	srv := httptest.NewServer(r)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "?since=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var evs []Event
	if err := json.NewDecoder(resp.Body).Decode(&evs); err != nil {
		t.Fatal(err)
	}
	stalls := 0
	for _, ev := range evs {
		if ev.Kind == Stall {
			stalls++
			if ev.N != 7 || ev.Dur < 0 {
				t.Fatalf("stall event %+v", ev)
			}
		}
	}
	if stalls != 1 {
		t.Fatalf("%d stall events served, want 1: %+v", stalls, evs)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
