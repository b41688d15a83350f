// Package timeline keeps a node's recent storage and raft events (synced commits, engine
// rounds, a catch-up's writes and reads, Pebble's flushes, compactions and write stalls) in
// a bounded ring, with when each began and how long it took, so that a latency episode can
// be laid beside what the node's store was doing at that moment (issue 30: the grow
// campaign's timeline of its worst episode). A nil *Recorder records nothing, so the
// packages that feed it need no check; the node makes one only when asked (--pprof).
//
// Every method is safe for concurrent use: events come from the raft engine's goroutine,
// the fetch goroutines and Pebble's background goroutines.
package timeline

import (
	"encoding/json"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// Kind names what an event is.
type Kind string

// The kinds recorded.
const (
	Round        Kind = "round"         // one raft engine round (N: groups with a Ready)
	Sync         Kind = "sync"          // a synced commit or sync the engine waited for
	CatchupWrite Kind = "catchup-write" // a fetched chunk written (N: bytes)
	CatchupRead  Kind = "catchup-read"  // a chunk read for another replica's catch-up (N: bytes)
	Restore      Kind = "restore"       // a round that installed snapshots (N: snapshots)
	Flush        Kind = "flush"         // a Pebble flush (N: bytes written)
	Compaction   Kind = "compaction"    // a Pebble compaction (N: bytes written)
	Stall        Kind = "stall"         // a Pebble write stall
	GC           Kind = "gc"            // a Go stop-the-world GC pause (added when read)
)

// Event is one recorded event. Start is in Unix nanoseconds.
type Event struct {
	Kind  Kind  `json:"k"`
	Start int64 `json:"s"`
	Dur   int64 `json:"d"` // nanoseconds
	N     int64 `json:"n,omitempty"`
}

// Recorder is a ring of the last events.
type Recorder struct {
	mu struct {
		sync.Mutex
		buf  []Event
		next int
		full bool
		open map[Kind]time.Time // events begun and not ended (Begin/End)
	}
}

// New returns a recorder keeping the last n events (n > 0).
func New(n int) *Recorder {
	r := &Recorder{}
	r.mu.buf = make([]Event, n)
	r.mu.open = map[Kind]time.Time{}
	return r
}

// Add records an event of kind that began at start and lasted d, with n (its size, in
// the kind's unit).
func (r *Recorder) Add(k Kind, start time.Time, d time.Duration, n int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addLocked(Event{Kind: k, Start: start.UnixNano(), Dur: int64(d), N: n})
}

func (r *Recorder) addLocked(ev Event) {
	r.mu.buf[r.mu.next] = ev
	r.mu.next++
	if r.mu.next == len(r.mu.buf) {
		r.mu.next, r.mu.full = 0, true
	}
}

// Begin notes that an event of kind began now, for a source that reports begin and end
// apart (Pebble's write stalls); End records it.
func (r *Recorder) Begin(k Kind) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.open[k] = time.Now()
}

// End records the event of kind begun by Begin, with n.
func (r *Recorder) End(k Kind, n int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	start, ok := r.mu.open[k]
	if !ok {
		return
	}
	delete(r.mu.open, k)
	r.addLocked(Event{Kind: k, Start: start.UnixNano(), Dur: int64(time.Since(start)), N: n})
}

// Since returns the events that ended at or after t, oldest first, with the process's last
// GC pauses (as many as the runtime keeps, 256) among them.
func (r *Recorder) Since(t time.Time) []Event {
	if r == nil {
		return nil
	}
	from := t.UnixNano()
	var out []Event
	r.mu.Lock()
	n := r.mu.next
	if r.mu.full {
		n = len(r.mu.buf)
	}
	for i := range n {
		j := i
		if r.mu.full {
			j = (r.mu.next + i) % len(r.mu.buf)
		}
		if ev := r.mu.buf[j]; ev.Start+ev.Dur >= from {
			out = append(out, ev)
		}
	}
	r.mu.Unlock()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for i := range min(int(ms.NumGC), len(ms.PauseEnd)) {
		end, d := int64(ms.PauseEnd[i]), int64(ms.PauseNs[i])
		if end >= from {
			out = append(out, Event{Kind: GC, Start: end - d, Dur: d})
		}
	}
	return out
}

// ServeHTTP writes the events since the query's "since" (Unix nanoseconds; default: all)
// as a JSON array.
func (r *Recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var since time.Time
	if s := req.URL.Query().Get("since"); s != "" {
		ns, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			http.Error(w, "since: want Unix nanoseconds", http.StatusBadRequest)
			return
		}
		since = time.Unix(0, ns)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.Since(since))
}
