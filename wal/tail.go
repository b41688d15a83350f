package wal

// NotifyFunc is Notify with a function instead of a channel: the completer calls fn whenever
// the topic's high-watermark advances, after it advanced. fn must not block and must not call
// back into the Log's notifications (Notify, NotifyFunc, cancel). It lets one reader of a
// topic (a node's shared tail) wake its own readers in the order it chooses. cancel stops
// the calls; it is safe to call more than once.
func (l *Log) NotifyFunc(topic string, fn func()) (cancel func()) {
	return l.watchTopic(topic, &watcher{fn: fn})
}
