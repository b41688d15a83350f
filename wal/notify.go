package wal

import (
	"sync"
	"sync/atomic"
)

// watchers holds the channels of Notify and NotifyNewTopics. The completer
// sends to them (never blocking) after it advanced high-watermarks.
type watchers struct {
	mu        sync.Mutex
	byTopic   map[string]map[*watcher]struct{}
	newTopics map[*watcher]struct{}
	// all is OnAdvance's function, or nil.
	all atomic.Pointer[func(topic string, id uint32, from, to uint64)]
	// moves are WatchAdvances' functions (copied on write under movesMu).
	moves   atomic.Pointer[[]*func(topic string, local bool)]
	movesMu sync.Mutex
}

type watcher struct {
	ch chan<- struct{}
	fn func() // instead of ch: NotifyFunc (node/tail's shared tail)
}

func (w *watchers) init() {
	w.byTopic = make(map[string]map[*watcher]struct{})
	w.newTopics = make(map[*watcher]struct{})
}

func (w *watcher) poke() {
	if w.fn != nil {
		w.fn()
		return
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// Notify makes a non-blocking send on ch whenever the topic's high-watermark
// advances (so a reader that waits on a channel with capacity 1 never misses
// a wake-up). The topic need not exist yet. cancel stops the sends; it is
// safe to call more than once.
func (l *Log) Notify(topic string, ch chan<- struct{}) (cancel func()) {
	return l.watchTopic(topic, &watcher{ch: ch})
}

func (l *Log) watchTopic(topic string, w *watcher) (cancel func()) {
	l.watch.mu.Lock()
	set := l.watch.byTopic[topic]
	if set == nil {
		set = make(map[*watcher]struct{})
		l.watch.byTopic[topic] = set
	}
	set[w] = struct{}{}
	l.watch.mu.Unlock()
	return func() {
		l.watch.mu.Lock()
		defer l.watch.mu.Unlock()
		if set := l.watch.byTopic[topic]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(l.watch.byTopic, topic)
			}
		}
	}
}

// NotifyNewTopics makes a non-blocking send on ch whenever a new topic
// becomes durable. cancel stops the sends; it is safe to call more than once.
func (l *Log) NotifyNewTopics(ch chan<- struct{}) (cancel func()) {
	w := &watcher{ch: ch}
	l.watch.mu.Lock()
	l.watch.newTopics[w] = struct{}{}
	l.watch.mu.Unlock()
	return func() {
		l.watch.mu.Lock()
		delete(l.watch.newTopics, w)
		l.watch.mu.Unlock()
	}
}

// wake pokes the watchers of the advanced topics, and the new-topic watchers
// if a topic was created. Runs on the completer.
func (w *watchers) wake(advances []advance, newTopic bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.byTopic) > 0 {
		for _, a := range advances {
			for x := range w.byTopic[a.t.name] {
				x.poke()
			}
		}
	}
	if newTopic {
		for x := range w.newTopics {
			x.poke()
		}
	}
}

// wakeTopic pokes the watchers of one topic (after a purge or a delete, so
// that readers waiting for records learn of it). Runs on the completer.
func (w *watchers) wakeTopic(name string, id uint32) {
	if fn := w.all.Load(); fn != nil {
		(*fn)(name, id, 0, 0)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for x := range w.byTopic[name] {
		x.poke()
	}
}

// OnAdvance has fn called for every advance of any topic's high-watermark, with the topic's
// name and ID (Instance.ID) and the high-watermark before and after it, in the order of the
// advances; and with from == to when a purge, a retention cut or a delete changed a topic
// otherwise. It is how one reader
// of many topics (a node's wildcard subscriptions) learns which of them moved without a
// registration per topic. fn runs on the goroutine that advances the high-watermark, with
// the Log's lock held for an advance: it must not block and must not call the Log. A Log
// has one such function; a later call replaces it, and cancel removes it.
//
// With TopicsWhile, a reader can tell exactly where each topic stood when it began: an
// advance either happened before TopicsWhile's listing (and shows in it) or is given to fn
// after it, never both.
func (l *Log) OnAdvance(fn func(topic string, id uint32, from, to uint64)) (cancel func()) {
	l.watch.all.Store(&fn)
	return func() { l.watch.all.CompareAndSwap(&fn, nil) }
}

// advanceLocked reports the advance of t's high-watermark from from to OnAdvance's
// function and WatchAdvances' functions; local: records first published in this region are
// among those it makes durable (or their origins are not known). Caller holds l.mu.
func (l *Log) advanceLocked(t *topic, from uint64, local bool) {
	if t.hwm <= from {
		return
	}
	if fn := l.watch.all.Load(); fn != nil {
		(*fn)(t.name, t.id, from, t.hwm)
	}
	if fns := l.watch.moves.Load(); fns != nil {
		for _, fn := range *fns {
			(*fn)(t.name, local)
		}
	}
}

// WatchAdvances has fn called with the topic's name after every advance of any topic's
// high-watermark: a registration for every topic at once, for a reader that follows the
// heads of many topics (the federation's catalog streams, a consumer group over a
// wildcard) without a watcher per topic.
// local tells whether records first published in this region (OriginRegion "") are among
// those the advance made durable, rather than only mirrored ones (always true for a
// replicated topic, whose origins are not told apart here). Any
// number of functions may be registered. fn runs on the goroutine that advances the
// high-watermark, with the Log's lock held: it must not block and must not call the Log.
// cancel stops the calls; it is safe to call more than once.
func (l *Log) WatchAdvances(fn func(topic string, local bool)) (cancel func()) {
	p := &fn
	l.watch.movesMu.Lock()
	defer l.watch.movesMu.Unlock()
	var fns []*func(topic string, local bool)
	if old := l.watch.moves.Load(); old != nil {
		fns = append(fns, *old...)
	}
	fns = append(fns, p)
	l.watch.moves.Store(&fns)
	return func() {
		l.watch.movesMu.Lock()
		defer l.watch.movesMu.Unlock()
		old := l.watch.moves.Load()
		if old == nil {
			return
		}
		var fns []*func(topic string, local bool)
		for _, f := range *old {
			if f != p {
				fns = append(fns, f)
			}
		}
		l.watch.moves.Store(&fns)
	}
}

// ListedTopic is a topic as TopicsWhile listed it: its log, its first retained offset and
// its high-watermark.
type ListedTopic struct {
	Instance
	Name        string
	ID          uint32 // Instance.ID, read with the rest
	First, Next uint64
}

// TopicsWhile calls fn and lists the durable topics, in no particular order. fn runs under
// the log's lock, with no high-watermark advancing, right before the listing starts: what fn
// registers to learn of advances (through OnAdvance's function) learns of every advance after
// it. The listing is taken topicsChunk topics per hold of the lock, so appends go on while a
// log of many topics is listed (100,000 held them up for 17 ms): a listed topic's Next may
// show advances made after fn, each of which fn's registration learns of too, the first with
// the high-watermark before it, which is the topic's Next at fn; a topic created after fn may
// or may not be listed (its creation is an advance from 0); one deleted after fn may still be
// listed (a read of it finds it deleted). So the listing as of fn is: each listed topic's
// Next replaced by the high-watermark before its first advance after fn, if it had one. fn
// must not call the Log.
func (l *Log) TopicsWhile(fn func()) []ListedTopic {
	l.mu.Lock()
	fn()
	out := make([]ListedTopic, 0, len(l.mu.topics))
	k := 0
	for _, t := range l.mu.topics {
		out = append(out, ListedTopic{Instance: Instance{t}, Name: t.name, ID: t.id, First: t.first, Next: t.hwm})
		if k++; k%topicsChunk == 0 {
			// Let appends through. The iteration goes on under the lock: entries added
			// meanwhile may be produced or not, removed ones are not (the Go spec's rule for
			// a map changed during its iteration).
			l.mu.Unlock()
			l.mu.Lock()
		}
	}
	l.mu.Unlock()
	return out
}

// topicsChunk is how many topics TopicsWhile lists per hold of the log's lock (well under a
// millisecond of appends held up).
const topicsChunk = 4096
