package wal

import "sync"

// watchers holds the channels of Notify and NotifyNewTopics. The completer
// sends to them (never blocking) after it advanced high-watermarks.
type watchers struct {
	mu        sync.Mutex
	byTopic   map[string]map[*watcher]struct{}
	newTopics map[*watcher]struct{}
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
func (w *watchers) wakeTopic(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for x := range w.byTopic[name] {
		x.poke()
	}
}
