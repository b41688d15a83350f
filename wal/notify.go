package wal

import (
	"slices"
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
}

type watcher struct {
	ch chan<- struct{}
	fn func() // instead of ch: NotifyFunc (tail.go)
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
// function. Caller holds l.mu.
func (l *Log) advanceLocked(t *topic, from uint64) {
	if fn := l.watch.all.Load(); fn != nil && t.hwm > from {
		(*fn)(t.name, t.id, from, t.hwm)
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

// TopicsWhile calls fn and lists the durable topics, in no particular order, with no
// high-watermark advancing meanwhile: whatever fn registers to learn of advances (through
// OnAdvance's function) learns of exactly those the listing does not show. fn must not call
// the Log.
func (l *Log) TopicsWhile(fn func()) []ListedTopic {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn()
	out := make([]ListedTopic, 0, len(l.mu.topics))
	for _, t := range l.mu.topics {
		out = append(out, ListedTopic{Instance: Instance{t}, Name: t.name, ID: t.id, First: t.first, Next: t.hwm})
	}
	return out
}

// journalLocked records that topic was created (l.mu held for writing). The journal is
// trimmed by half once it holds more than twice the topics (and 1024) entries: topics
// created and deleted over and over must not grow it without bound; a reader whose cursor
// falls below its start lists every topic again (NewTopicsSince).
func (l *Log) journalLocked(topic string) {
	l.mu.created = append(l.mu.created, topic)
	if n := len(l.mu.created); n > 2*len(l.mu.topics)+1024 {
		drop := n / 2
		l.mu.created = slices.Clone(l.mu.created[drop:])
		l.mu.createdBase += uint64(drop)
	}
}

// TopicsCursor returns every durable topic (unordered) and the cursor, for
// NewTopicsSince, of the first topic created after them.
func (l *Log) TopicsCursor() ([]string, uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]string, 0, len(l.mu.topics))
	for name := range l.mu.topics {
		out = append(out, name)
	}
	return out, l.mu.createdBase + uint64(len(l.mu.created))
}

// NewTopicsSince returns the names of the topics created from cursor on, in order of
// creation, and the cursor past them, in time proportional to what it returns: what a
// watcher woken by NotifyNewTopics reads instead of listing every topic. A topic may have
// been deleted since. ok is false when cursor is older than the journal keeps (after much
// churn): the caller lists the topics again (TopicsCursor).
func (l *Log) NewTopicsSince(cursor uint64) (names []string, next uint64, ok bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	end := l.mu.createdBase + uint64(len(l.mu.created))
	if cursor < l.mu.createdBase {
		return nil, end, false
	}
	if cursor >= end {
		return nil, end, true
	}
	return slices.Clone(l.mu.created[cursor-l.mu.createdBase:]), end, true
}
