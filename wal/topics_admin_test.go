package wal

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// topicID returns the ID of a durable topic (test access to the table).
func topicID(t *testing.T, l *Log, name string) uint32 {
	t.Helper()
	l.mu.RLock()
	defer l.mu.RUnlock()
	tp := l.mu.topics[name]
	if tp == nil {
		t.Fatalf("topic %q not durable", name)
	}
	return tp.id
}

// rawKeys counts the stored keys in [lower, upper) as Pebble shows them.
func rawKeys(t *testing.T, l *Log, lower, upper []byte) int {
	t.Helper()
	it, err := l.pdb.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n
}

// keysOfID counts every record, retention and config key left of a topic ID.
func keysOfID(t *testing.T, l *Log, id uint32) int {
	t.Helper()
	n := rawKeys(t, l, recordKey(id, 0), recordKey(id, math.MaxUint64))
	n += rawKeys(t, l, retentionKey(id), prefixEnd(retentionKey(id)))
	return n + rawKeys(t, l, configKey(id), prefixEnd(configKey(id)))
}

func TestTopicConfigDurableAndEnforced(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{Now: clock.Now, Retention: Retention{MaxAge: time.Hour}})
	for m := range 10 {
		mustAppend(t, l, "a", m*10, 10)
		mustAppend(t, l, "b", m*10, 10)
		clock.Advance(10 * time.Minute)
	}
	if cfg, ok := l.TopicConfig("a"); !ok || cfg != (TopicConfig{}) {
		t.Fatalf("TopicConfig before = %+v %v", cfg, ok)
	}
	mustSetRetention(t, l, "a", Retention{MaxAge: 30 * time.Minute})
	mustSetRetention(t, l, "b", Retention{}) // kept forever, against the default hour
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{Now: clock.Now, Retention: Retention{MaxAge: time.Hour}})
	want := TopicConfig{Retention: Retention{MaxAge: 30 * time.Minute}, RetentionSet: true}
	if cfg, ok := l.TopicConfig("a"); !ok || cfg != want {
		t.Fatalf("TopicConfig(a) after reopen = %+v %v, want %+v", cfg, ok, want)
	}
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	// now = start+100m: a keeps records of the last 30 minutes (from start+70m).
	if first, _, _ := l.Bounds("a"); first != 70 {
		t.Errorf("a's own retention: first %d, want 70", first)
	}
	if first, _, _ := l.Bounds("b"); first != 0 {
		t.Errorf("b kept forever: first %d, want 0", first)
	}
	// Cleared: back to the default hour, durably.
	if _, err := l.SetTopicConfig(t.Context(), "b", TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if n := rawKeys(t, l, configKey(topicID(t, l, "b")), prefixEnd(configKey(topicID(t, l, "b")))); n != 0 {
		t.Errorf("cleared config left %d keys", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{Now: clock.Now, Retention: Retention{MaxAge: time.Hour}})
	if cfg, ok := l.TopicConfig("b"); !ok || cfg.RetentionSet {
		t.Fatalf("b's config after clear and reopen: %+v %v", cfg, ok)
	}
	if err := l.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := l.Bounds("b"); first != 40 {
		t.Errorf("b on the default hour: first %d, want 40", first)
	}
	if _, err := l.SetTopicConfig(t.Context(), "a", TopicConfig{Retention: Retention{MaxAge: -1}, RetentionSet: true}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("negative retention: %v", err)
	}
}

func TestCreateTopic(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{})
	newTopics := make(chan struct{}, 1)
	defer l.NotifyNewTopics(newTopics)()
	cfg := TopicConfig{Retention: Retention{MaxBytes: 1 << 20}, RetentionSet: true}
	info, err := l.CreateTopic(t.Context(), "orders.eu", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := (TopicInfo{Name: "orders.eu", Config: cfg}); info != want {
		t.Fatalf("CreateTopic = %+v, want %+v", info, want)
	}
	select {
	case <-newTopics:
	default:
		t.Error("NotifyNewTopics not woken by CreateTopic")
	}
	if got := l.Topics(); len(got) != 1 || got[0] != info {
		t.Errorf("Topics = %+v", got)
	}
	if first, next, ok := l.Bounds("orders.eu"); !ok || first != 0 || next != 0 {
		t.Errorf("Bounds = %d %d %v", first, next, ok)
	}
	if recs, err := l.Read("orders.eu", 0, 10, 0); err != nil || len(recs) != 0 {
		t.Errorf("Read of an empty topic = %v %v", recs, err)
	}
	// The same again is no change; another config is refused, naming the one it has.
	if _, err := l.CreateTopic(t.Context(), "orders.eu", cfg); err != nil {
		t.Errorf("create again with the same config: %v", err)
	}
	_, err = l.CreateTopic(t.Context(), "orders.eu", TopicConfig{})
	var te *TopicExistsError
	if !errors.As(err, &te) || !errors.Is(err, ErrTopicExists) || te.Config != cfg {
		t.Errorf("create with another config: %v", err)
	}
	for _, bad := range []string{"", "a..b", "a.*", "a b", string(make([]byte, 300))} {
		if _, err := l.CreateTopic(t.Context(), bad, TopicConfig{}); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("CreateTopic(%q) = %v, want ErrInvalidRequest", bad, err)
		}
	}
	// Asked to update: it does.
	if info, err := l.SetTopicConfig(t.Context(), "orders.eu", TopicConfig{}); err != nil || info.Config.RetentionSet {
		t.Errorf("SetTopicConfig = %+v %v", info, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{})
	if got := l.Topics(); len(got) != 1 || got[0].Name != "orders.eu" || got[0].Next != 0 {
		t.Fatalf("after reopen: %+v", got)
	}
	mustAppend(t, l, "orders.eu", 0, 3)
	// Created by the first append, as before, after one that was created explicitly.
	mustAppend(t, l, "orders.us", 0, 1)
	if a, b := topicID(t, l, "orders.eu"), topicID(t, l, "orders.us"); a == b {
		t.Errorf("two topics share ID %d", a)
	}
}

func TestPurgeTopic(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{})
	mustAppend(t, l, "p", 0, 100)
	mustAppend(t, l, "other", 0, 5)
	if err := l.SetPosition(t.Context(), Position{Name: "c", Topic: "p", Value: 49}); err != nil {
		t.Fatal(err)
	}
	mustSetRetention(t, l, "p", Retention{MaxAge: time.Hour})
	wake := make(chan struct{}, 1)
	defer l.Notify("p", wake)()
	res, err := l.PurgeTopic(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	if res != (PurgeResult{First: 0, Next: 100, Records: 100}) {
		t.Errorf("PurgeTopic = %+v", res)
	}
	select {
	case <-wake:
	default:
		t.Error("watchers of the purged topic not woken")
	}
	check := func(next uint64) {
		t.Helper()
		if first, n, ok := l.Bounds("p"); !ok || first != 100 || n != next {
			t.Errorf("Bounds after purge = %d %d %v, want 100 %d", first, n, ok, next)
		}
		var oor *OffsetOutOfRangeError
		if _, err := l.Read("p", 0, 1, 0); !errors.As(err, &oor) || oor.First != 100 {
			t.Errorf("read of a purged offset: %v", err)
		}
		if v, ok, _ := l.Position("c", "p"); !ok || v != 49 {
			t.Errorf("position after purge = %d %v", v, ok)
		}
		if cfg, _ := l.TopicConfig("p"); cfg.Retention.MaxAge != time.Hour {
			t.Errorf("config after purge = %+v", cfg)
		}
		if n := rawKeys(t, l, recordKey(topicID(t, l, "p"), 0), recordKey(topicID(t, l, "p"), 100)); n != 0 {
			t.Errorf("%d purged records still stored", n)
		}
	}
	check(100)
	if st := l.Stats(); st.LogBytes != l.Topics()[0].Bytes {
		t.Errorf("log bytes %d after purge, other topic has %d", st.LogBytes, l.Topics()[0].Bytes)
	}
	// Offsets go on; they are never reused, also across a reopen.
	res2 := l.Append(t.Context(), AppendRequest{Topic: "p", Records: []Record{{Payload: []byte("after")}}})
	if res2.Err != nil || res2.First != 100 {
		t.Fatalf("append after purge: %+v", res2)
	}
	check(101)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{})
	check(101)
	if recs := mustReadAll(t, l, "other", 0); len(recs) != 5 {
		t.Errorf("other topic: %d records", len(recs))
	}
	// A purge of the rest, then of nothing.
	if res, err := l.PurgeTopic(t.Context(), "p"); err != nil || res.Records != 1 {
		t.Errorf("second purge = %+v %v", res, err)
	}
	if res, err := l.PurgeTopic(t.Context(), "p"); err != nil || res.Records != 0 || res.Next != 101 {
		t.Errorf("purge of an empty topic = %+v %v", res, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{})
	if first, next, _ := l.Bounds("p"); first != 101 || next != 101 {
		t.Errorf("emptied topic after reopen: %d %d", first, next)
	}
	if _, err := l.PurgeTopic(t.Context(), "nope"); !errors.Is(err, ErrUnknownTopic) {
		t.Errorf("purge of an unknown topic: %v", err)
	}
}

func TestDeleteTopic(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{})
	mustAppend(t, l, "a", 0, 50)
	mustAppend(t, l, "b", 0, 5)
	mustSetRetention(t, l, "a", Retention{MaxBytes: 1 << 30})
	for _, p := range []Position{{Name: "c1", Topic: "a", Value: 10}, {Name: "mirror/eu", Topic: "a", Value: 7}, {Name: "c1", Topic: "b", Value: 3}, {Name: "c1", Topic: "ab", Value: 2}} {
		if err := l.SetPosition(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	// A clean close leaves a's high-watermark in the close marker; the delete
	// must not make the next Open take the topic for lost.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{})
	old := topicID(t, l, "a")
	sc := l.NewScanner("a")
	defer sc.Release()
	if n, err := sc.ReadFunc(0, 10, 0, func(*Record) error { return nil }); n != 10 || err != nil {
		t.Fatalf("scanner before delete: %d %v", n, err)
	}
	n, err := l.DeleteTopic(t.Context(), "a")
	if err != nil || n != 50 {
		t.Fatalf("DeleteTopic = %d %v", n, err)
	}
	checkGone := func() {
		t.Helper()
		for _, ti := range l.Topics() {
			if ti.Name == "a" {
				t.Errorf("deleted topic listed: %+v", ti)
			}
		}
		if _, ok := l.TopicConfig("a"); ok {
			t.Error("deleted topic has a config")
		}
		for _, name := range []string{"c1", "mirror/eu"} {
			if _, ok, _ := l.Position(name, "a"); ok {
				t.Errorf("position %s of the deleted topic kept", name)
			}
		}
		if v, ok, _ := l.Position("c1", "b"); !ok || v != 3 {
			t.Errorf("position of another topic: %d %v", v, ok)
		}
		if v, ok, _ := l.Position("c1", "ab"); !ok || v != 2 {
			t.Errorf("position of a topic whose name extends the deleted one: %d %v", v, ok)
		}
		if n := keysOfID(t, l, old); n != 0 {
			t.Errorf("%d keys of the deleted topic ID %d left", n, old)
		}
		if n := rawKeys(t, l, positionTopicPrefix("a"), prefixEnd(positionTopicPrefix("a"))); n != 0 {
			t.Errorf("%d position keys of the deleted topic left", n)
		}
	}
	checkGone()
	if _, err := l.Read("a", 0, 1, 0); !errors.Is(err, ErrTopicDeleted) {
		t.Errorf("read of the deleted topic: %v", err)
	}
	if _, err := sc.ReadFunc(10, 10, 0, func(*Record) error { return nil }); !errors.Is(err, ErrTopicDeleted) {
		t.Errorf("scanner after delete: %v", err)
	}
	if err := l.SetPosition(t.Context(), Position{Name: "c1", Topic: "a", Value: 11}); !errors.Is(err, ErrTopicDeleted) {
		t.Errorf("late position of the deleted topic: %v", err)
	}
	if _, err := l.DeleteTopic(t.Context(), "a"); !errors.Is(err, ErrTopicDeleted) {
		t.Errorf("delete again: %v", err)
	}
	// After a reopen it stays gone, and the close marker does not object.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{})
	checkGone()
	// A new topic of the name starts at 0 with a new ID; the old scanner does not read it.
	mustAppend(t, l, "a", 0, 2)
	if id := topicID(t, l, "a"); id <= old {
		t.Errorf("new topic ID %d, the deleted one was %d", id, old)
	}
	if err := l.SetPosition(t.Context(), Position{Name: "c1", Topic: "a", Value: 0}); err != nil {
		t.Errorf("position of the new topic: %v", err)
	}
	if recs := mustReadAll(t, l, "a", 0); len(recs) != 2 || string(recs[0].Payload) != string(testPayload("a", 0)) {
		t.Errorf("new topic reads %v", recs)
	}
}

// TestDeleteTopicIDNotReused: deleting the topic with the highest ID and
// reopening does not hand its ID out again.
func TestDeleteTopicIDNotReused(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{})
	mustAppend(t, l, "a", 0, 1)
	if _, err := l.CreateTopic(t.Context(), "b", TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	idB := topicID(t, l, "b")
	if _, err := l.DeleteTopic(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{})
	if _, err := l.CreateTopic(t.Context(), "b", TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if id := topicID(t, l, "b"); id <= idB {
		t.Errorf("recreated topic got ID %d, the deleted one had %d", id, idB)
	}
}

// TestRetentionAfterPurgeNeverMovesBack: a retention cut computed before a
// purge (a pass that raced it) is applied after it without moving the first
// offset back, also after a reopen, and offsets are not reused.
func TestRetentionAfterPurgeNeverMovesBack(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, Options{})
	mustAppend(t, l, "r", 0, 100)
	stale, _ := l.view("r")
	if _, err := l.PurgeTopic(t.Context(), "r"); err != nil {
		t.Fatal(err)
	}
	if err := l.retain(stale, Retention{MaxBytes: 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if first, next, _ := l.Bounds("r"); first != 100 || next != 100 {
		t.Fatalf("after a stale retention cut: %d %d, want 100 100", first, next)
	}
	// The same against a later topic of the name: the cut is not applied to it.
	if _, err := l.DeleteTopic(t.Context(), "r"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "r", 0, 10)
	if err := l.retain(stale, Retention{MaxBytes: 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if first, next, _ := l.Bounds("r"); first != 0 || next != 10 {
		t.Fatalf("a cut of the deleted topic applied to the new one: %d %d", first, next)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, Options{})
	mustAppend(t, l, "r", 10, 1)
}
