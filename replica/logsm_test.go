package replica

import (
	"testing"
)

func TestLogSMAssignsDenseOffsetsAndClampsTime(t *testing.T) {
	db := openTestDB(t, nil)
	sm := NewLogSM(db)
	if a, err := sm.Applied(5); err != nil || a != 0 {
		t.Fatalf("applied of a new group: %d, %v", a, err)
	}
	b := db.NewBatch()
	// Raft indexes 1 (an empty entry, not a record), 2, 3 and 5 (4 a
	// configuration change): offsets 0, 1, 2; time 2 goes back and is
	// clamped to the time before it.
	res, err := sm.Apply(b, 5, 5, []Entry{{Index: 2, Time: 100, Data: []byte("a")}, {Index: 3, Time: 90, Data: []byte("b")}, {Index: 5, Time: 120, Data: []byte("c")}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{{Index: 2, Offset: 0, Time: 100}, {Index: 3, Offset: 1, Time: 100}, {Index: 5, Offset: 2, Time: 120}}
	if len(res) != len(want) {
		t.Fatalf("results %v, want %v", res, want)
	}
	for i := range want {
		if res[i] != want[i] {
			t.Fatalf("result %d = %+v, want %+v", i, res[i], want[i])
		}
	}
	if recs, _ := sm.Read(5, 0, 10); len(recs) != 0 {
		t.Fatalf("records readable before the batch is committed: %v", recs)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	sm.Committed()
	recs, err := sm.Read(5, 0, 10)
	if err != nil || len(recs) != 3 || string(recs[2].Data) != "c" || recs[1].Time != 100 {
		t.Fatalf("read after commit: %+v, %v", recs, err)
	}
	// Entries handed over again after a restart are skipped, and the
	// state comes back from Pebble.
	sm2 := NewLogSM(db)
	if a, err := sm2.Applied(5); err != nil || a != 5 {
		t.Fatalf("applied after reopen: %d, %v", a, err)
	}
	b = db.NewBatch()
	res, err = sm2.Apply(b, 5, 6, []Entry{{Index: 5, Time: 1, Data: []byte("c")}, {Index: 6, Time: 1, Data: []byte("d")}})
	if err != nil || len(res) != 1 || res[0] != (Result{Index: 6, Offset: 3, Time: 120}) {
		t.Fatalf("apply after reopen: %+v, %v", res, err)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	sm2.Committed()
	if next, applied := sm2.Next(5); next != 4 || applied != 6 {
		t.Fatalf("next/applied = %d/%d, want 4/6", next, applied)
	}
	if recs, _ := sm2.Read(9, 0, 10); len(recs) != 0 {
		t.Fatalf("another group has records: %v", recs)
	}
}
